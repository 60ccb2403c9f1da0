-- Turn the shard audit on (after seeding, so the bulk load is not audited).
drop trigger if exists chaos_readings_ins on readings;
create trigger chaos_readings_ins after insert on readings
    referencing new table as new_rows for each statement execute function chaos_readings_ins_fn();
drop trigger if exists chaos_readings_del on readings;
create trigger chaos_readings_del after delete on readings
    referencing old table as old_rows for each statement execute function chaos_readings_del_fn();
drop trigger if exists chaos_fence on mover_fence;
create trigger chaos_fence after update on mover_fence
    referencing new table as new_rows for each statement execute function chaos_fence_fn();
