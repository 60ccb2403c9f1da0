//! The sweep's pure half: each run's figures as data, the rows and conclusion they fold into, and the table as text, CSV, SVG and HTML (`chaos sweep` measures the runs and writes the files).

mod figures;
pub mod html;
pub mod svg;
pub mod table;

pub use figures::{FalseExpiry, RunFigures, Stall};
