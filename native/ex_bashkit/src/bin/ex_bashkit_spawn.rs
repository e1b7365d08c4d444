//! `ex_bashkit_spawn`: asks the zygote for a worker on this process's
//! pipes, then exits (`worker/zygote/spawn.rs`, included whole: the
//! library is not linked, so this starts fast). Linux only, as the zygote.

#[cfg(target_os = "linux")]
#[path = "../worker/zygote/spawn.rs"]
mod spawn;

#[cfg(target_os = "linux")]
fn main() {
    std::process::exit(spawn::main());
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("ex_bashkit_spawn: no zygote on this system");
    std::process::exit(71);
}
