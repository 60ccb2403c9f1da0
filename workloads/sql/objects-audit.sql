-- Turn the objects' audit on (after the initial version is installed, so it is not audited).
drop trigger if exists chaos_objects on config_objects;
create trigger chaos_objects after update on config_objects
    for each row execute function chaos_object_fn();
drop trigger if exists chaos_versions on config_versions;
create trigger chaos_versions after insert on config_versions
    for each row execute function chaos_object_fn();
drop trigger if exists chaos_pointer on config_pointer;
create trigger chaos_pointer after update on config_pointer
    for each row execute function chaos_object_fn();
