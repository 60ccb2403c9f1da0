//! The reference mover (stub until the mover lands).
fn main() {
    eprintln!("mover: not built yet");
    std::process::exit(2);
}
