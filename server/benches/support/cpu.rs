//! CPU time as `/proc` counts it, for the benches that measure it (`proxy` per thread, `memory`
//! per process).

/// Clock ticks per second in `/proc/.../stat`: Linux's `USER_HZ`, 100 on every architecture
/// this runs on.
pub const USER_HZ: f64 = 100.0;

/// The name and the user plus system time (clock ticks) in the text of a `/proc/<pid>/stat` or
/// `/proc/<pid>/task/<tid>/stat` file.
pub fn stat_ticks(stat: &str) -> (&str, u64) {
    // The name is the 2nd field, in parentheses, and may hold spaces or parentheses itself.
    let (head, rest) = stat.rsplit_once(')').unwrap();
    let name = head.split_once('(').map_or("", |(_, name)| name);
    // utime and stime are the 14th and 15th fields of the line, so the 12th and 13th after it.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    (name, fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap())
}
