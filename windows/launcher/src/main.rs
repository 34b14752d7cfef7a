//! rocmguard.exe, the Windows launcher: `rocmguard run [options] -- COMMAND ARGS...` starts
//! COMMAND suspended with the guard's `ROCMGUARD_*` settings in its environment, injects
//! rocmguard.dll, resumes it, waits and exits with its exit code. Where the DLL cannot be
//! injected, COMMAND runs all the same, unguarded, and the launcher says so.

mod options;

use std::ffi::OsString;
use std::io;
use std::os::windows::io::AsRawHandle;
use std::os::windows::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocmguard_inject as inject;

/// The DLL's file name, looked for beside this program.
const DLL_NAME: &str = "rocmguard.dll";
const CREATE_SUSPENDED: u32 = 0x4;

#[link(name = "kernel32")]
extern "system" {
    fn SetConsoleCtrlHandler(handler: *mut std::ffi::c_void, add: i32) -> i32;
}

fn main() {
    std::process::exit(run_main());
}

fn usage() -> String {
    format!(
        "rocmguard {} (Windows): keeps HIP programs alive on AMD GPUs.\n\n\
         Usage: rocmguard run [OPTIONS] [--] COMMAND [ARGS]...   (rocmguard run --help)\n       \
         rocmguard --version\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn run_main() -> i32 {
    let mut args = std::env::args_os().skip(1);
    let first = args.next();
    match first.as_ref().and_then(|a| a.to_str()) {
        Some("run") => {}
        Some("--version") | Some("-V") => {
            println!("rocmguard {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Some("--help") | Some("-h") => {
            print!("{}", usage());
            return 0;
        }
        Some(other) => {
            eprintln!(
                "rocmguard: unknown command `{}`; the Windows build has `run`\n\n{}",
                other,
                usage()
            );
            return 2;
        }
        None => {
            eprint!("{}", usage());
            return 2;
        }
    }
    let rest: Vec<OsString> = args.collect();
    if matches!(
        rest.first().and_then(|a| a.to_str()),
        Some("--help") | Some("-h")
    ) {
        print!("{}", options::help());
        return 0;
    }
    match options::parse(rest) {
        Ok(run) => launch(run),
        Err(e) => {
            eprintln!("rocmguard: {}", e);
            2
        }
    }
}

/// Where rocmguard.dll is: `--dll`, else `$ROCMGUARD_LIB`, else beside this program; made
/// absolute, since the child resolves it from its own directory.
fn find_dll(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let (path, from) = match (explicit, std::env::var_os("ROCMGUARD_LIB")) {
        (Some(p), _) => (p.to_path_buf(), "--dll"),
        (None, Some(p)) => (PathBuf::from(p), "ROCMGUARD_LIB"),
        (None, None) => {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find rocmguard.exe itself: {}", e))?;
            (exe.with_file_name(DLL_NAME), "beside rocmguard.exe")
        }
    };
    let path = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map_err(|e| e.to_string())?
            .join(path)
    };
    if !path.is_file() {
        return Err(format!("{} ({}) does not exist", path.display(), from));
    }
    Ok(path)
}

fn launch(run: options::Run) -> i32 {
    let dll = find_dll(run.dll.as_deref());
    let (program, rest) = match run.command.split_first() {
        Some(split) => split,
        None => return 2,
    };
    if run.dry_run {
        for (var, value) in &run.vars {
            println!("set {}={}", var, value);
        }
        match &dll {
            Ok(path) => println!("inject {}", path.display()),
            Err(why) => println!("inject nothing: {}", why),
        }
        let words: Vec<String> = run
            .command
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        println!("run {}", words.join(" "));
        return 0;
    }

    let name = program.to_string_lossy().into_owned();
    let mut cmd = Command::new(program);
    cmd.args(rest).creation_flags(CREATE_SUSPENDED);
    for (var, value) in &run.vars {
        cmd.env(var, value);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rocmguard: cannot run `{}`: {}", name, e);
            return if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    // Ctrl+C reaches the program, which decides; we wait for it and pass its code on.
    // SAFETY: a null handler with add = TRUE makes this process ignore Ctrl+C.
    unsafe { SetConsoleCtrlHandler(std::ptr::null_mut(), 1) };

    let thread = match inject::main_thread(child.id()) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("rocmguard: cannot start `{}`: {}", name, why);
            let _ = child.kill();
            return 126;
        }
    };
    let injected = dll.and_then(|path| inject::inject(child.as_raw_handle(), &path));
    if let Err(why) = injected {
        eprintln!(
            "rocmguard: could not inject rocmguard.dll into `{}` (pid {}): {}\n\
             rocmguard: `{}` runs UNGUARDED: no cap, no retry on out-of-memory, no handle guard",
            name,
            child.id(),
            why,
            name
        );
    }
    if let Err(why) = inject::resume(thread.0) {
        eprintln!("rocmguard: cannot start `{}`: {}", name, why);
        let _ = child.kill();
        return 126;
    }
    match child.wait() {
        Ok(status) => status.code().unwrap_or(1),
        Err(e) => {
            eprintln!("rocmguard: lost track of `{}`: {}", name, e);
            1
        }
    }
}
