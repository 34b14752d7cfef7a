//! `rocmguard run` in real processes: the preload and the configuration reach the command and
//! its children, exit codes and signals are the command's own, profiles say what they set.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output};

use rocmguard_cli::run::profiles;
use rocmguard_core::KEYS;
use rocmguard_tests::{
    cli, cli_command, compile_c, output, release_dir, root, scratch_dir, shim_lib, text,
};

const SIGTERM: i32 = 15;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `rocmguard run ARGS` with a clean environment.
fn run(args: &[&str]) -> Output {
    output(cli_command().arg("run").args(args))
}

/// The environment a command sees under `rocmguard run ARGS -- env`, as VAR=value lines.
fn env_under(cmd: &mut Command) -> Vec<String> {
    let out = output(cmd);
    assert!(out.status.success(), "{}", text(&out));
    stdout(&out).lines().map(str::to_string).collect()
}

/// A small shared library to preload next to the shim.
fn marker_lib() -> PathBuf {
    let lib = release_dir().join("c-tests/libcli_marker.so");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    let out = output(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(root().join("tests/c/cli_marker.c")),
    );
    assert!(out.status.success(), "{}", text(&out));
    lib
}

#[test]
fn preload_is_prepended_and_the_caller_s_kept() {
    let marker = marker_lib();
    let out = output(
        cli_command()
            .env("LD_PRELOAD", &marker)
            .args(["run", "--", "sh", "-c"])
            .arg("echo \"$LD_PRELOAD\"; grep -o -e librocmguard.so -e libcli_marker.so /proc/self/maps | sort -u"),
    );
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    let expected = format!(
        "{}:{}",
        shim_lib().canonicalize().unwrap().display(),
        marker.display()
    );
    assert_eq!(lines[0], expected, "{}", text(&out));
    assert_eq!(
        lines[1..],
        ["libcli_marker.so", "librocmguard.so"],
        "both are loaded: {}",
        text(&out)
    );

    // A second launch does not stack a second copy of the shim.
    let out = output(cli_command().env("LD_PRELOAD", &expected).args([
        "run",
        "--",
        "sh",
        "-c",
        "echo \"$LD_PRELOAD\"",
    ]));
    assert_eq!(stdout(&out).trim(), expected, "{}", text(&out));
}

#[test]
fn exit_codes_pass_through() {
    let out = run(&["--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let out = run(&["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn the_launcher_becomes_the_command_so_signals_are_its_own() {
    let out = run(&["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.signal(), Some(SIGTERM), "{}", text(&out));
    assert_eq!(out.status.code(), None);

    // exec, not spawn: the shell has the launcher's pid.
    let child = cli_command()
        .args(["run", "--", "sh", "-c", "echo $$"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out).trim(), pid.to_string());
}

#[test]
fn children_and_grandchildren_are_guarded() {
    let out = run(&[
        "--cap",
        "20GiB",
        "--trim-threshold",
        "0.7",
        "--stats",
        "--",
        "sh",
        "-c",
        "sh -c 'echo $ROCMGUARD_VRAM_LIMIT $ROCMGUARD_TRIM_THRESHOLD $ROCMGUARD_STATS; grep -q librocmguard.so /proc/self/maps && echo mapped'",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(stdout(&out), "20GiB 0.7 1\nmapped\n", "{}", text(&out));
}

#[test]
fn every_key_is_an_option_and_set_takes_any() {
    let help = stdout(&run(&["--help"]));
    for key in KEYS {
        assert!(
            help.contains(&key.var()),
            "{} missing from --help:\n{}",
            key.var(),
            help
        );
    }
    assert!(
        help.contains("--cap <VRAM_LIMIT>") && help.contains("--trim-threshold"),
        "{}",
        help
    );

    let vars = env_under(cli_command().args([
        "run",
        "--headroom",
        "512MiB",
        "--set",
        "retries=5",
        "--set",
        "ROCMGUARD_MAX_SPLIT=64MiB",
        "--set",
        "host-reserve=12GiB",
        "--uma=0",
        "--",
        "env",
    ]));
    for expected in [
        "ROCMGUARD_HEADROOM=512MiB",
        "ROCMGUARD_RETRIES=5",
        "ROCMGUARD_MAX_SPLIT=64MiB",
        "ROCMGUARD_HOST_RESERVE=12GiB",
        "ROCMGUARD_UMA=0",
    ] {
        assert!(
            vars.iter().any(|v| v == expected),
            "{} not in {:?}",
            expected,
            vars
        );
    }
}

#[test]
fn each_profile_reaches_the_command_and_says_why() {
    for profile in profiles::builtin() {
        let out = output(cli_command().args(["run", "--profile", &profile.name, "--", "env"]));
        assert!(out.status.success(), "{}: {}", profile.name, text(&out));
        let vars = stdout(&out);
        let said = stderr(&out);
        assert!(
            said.contains(&format!("profile {}", profile.name)),
            "{}",
            said
        );
        for s in &profile.settings {
            let line = format!("{}={}", s.var, s.value);
            assert!(
                vars.lines().any(|l| l == line),
                "{}: {} not in\n{}",
                profile.name,
                line,
                vars
            );
            assert!(
                said.contains(&line) && said.contains(&s.why),
                "{}: {} unexplained:\n{}",
                profile.name,
                line,
                said
            );
        }
        assert!(vars
            .lines()
            .any(|l| l == format!("ROCMGUARD_PROFILE={}", profile.name)));
    }
    // --quiet keeps stderr for the program.
    let out = run(&["--quiet", "--profile", "debug", "--", "true"]);
    assert!(stderr(&out).is_empty(), "{}", text(&out));
}

#[test]
fn options_win_over_profiles_which_win_over_the_environment() {
    let out = output(
        cli_command()
            .env("HSA_OVERRIDE_GFX_VERSION", "11.0.0")
            .env("ROCMGUARD_HEADROOM", "3GiB")
            .args([
                "run",
                "--profile",
                "24gb",
                "--profile",
                "rdna2",
                "--cap",
                "18GiB",
                "--",
                "env",
            ]),
    );
    assert!(out.status.success(), "{}", text(&out));
    let vars = stdout(&out);
    for expected in [
        "ROCMGUARD_VRAM_LIMIT=18GiB",
        "ROCMGUARD_HEADROOM=1GiB",
        "HSA_OVERRIDE_GFX_VERSION=10.3.0",
        "ROCMGUARD_PROFILE=24gb,rdna2",
    ] {
        assert!(
            vars.lines().any(|l| l == expected),
            "{} not in\n{}",
            expected,
            vars
        );
    }
    let said = stderr(&out);
    assert!(said.contains("[replaced: --cap sets 18GiB]"), "{}", said);
    assert!(
        said.contains("[was 11.0.0 in your environment]"),
        "{}",
        said
    );
}

#[test]
fn user_profiles_from_a_file_and_the_default_place() {
    let dir = scratch_dir("cli-run-profiles");
    let file = dir.join("mine.toml");
    std::fs::write(
        &file,
        "[box]\nabout = \"my box\"\nextends = \"24gb\"\ncap = \"21GiB\"\nenv.MIOPEN_FIND_MODE = { value = \"FAST\", why = \"tuning takes hours\" }\n",
    )
    .unwrap();
    let out = output(
        cli_command()
            .arg("run")
            .arg("--profile-file")
            .arg(&file)
            .args(["--profile", "box", "--", "env"]),
    );
    assert!(out.status.success(), "{}", text(&out));
    let vars = stdout(&out);
    for expected in [
        "ROCMGUARD_VRAM_LIMIT=21GiB",
        "ROCMGUARD_HEADROOM=1GiB",
        "MIOPEN_FIND_MODE=FAST",
    ] {
        assert!(
            vars.lines().any(|l| l == expected),
            "{} not in\n{}",
            expected,
            vars
        );
    }
    assert!(
        stderr(&out).contains("tuning takes hours"),
        "{}",
        text(&out)
    );

    // $XDG_CONFIG_HOME/rocmguard/profiles.toml is read without an option, and listed.
    let config = dir.join("config");
    std::fs::create_dir_all(config.join("rocmguard")).unwrap();
    std::fs::copy(&file, config.join("rocmguard/profiles.toml")).unwrap();
    let out = output(
        cli_command()
            .env("XDG_CONFIG_HOME", &config)
            .args(["run", "--list-profiles"]),
    );
    assert!(out.status.success(), "{}", text(&out));
    let listed = stdout(&out);
    assert!(
        listed.contains("box (from ") && listed.contains("MIOPEN_FIND_MODE=FAST"),
        "{}",
        listed
    );
    for p in profiles::builtin() {
        assert!(listed.contains(&p.about), "{} missing:\n{}", p.name, listed);
    }

    // A bad file names the file, the profile and the problem.
    std::fs::write(&file, "[box]\ncap = \"lots\"\n").unwrap();
    let out = output(
        cli_command()
            .arg("run")
            .arg("--profile-file")
            .arg(&file)
            .args(["--profile", "box", "true"]),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = stderr(&out);
    assert!(
        said.contains("mine.toml") && said.contains("`box`") && said.contains("lots"),
        "{}",
        said
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_name_what_was_wrong_and_what_to_do() {
    let out = run(&["--cap", "20XB", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--cap") && stderr(&out).contains("unknown unit"),
        "{}",
        text(&out)
    );

    let out = run(&["--set", "vram_limt=1G", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown key `vram_limt`") && stderr(&out).contains("vram_limit"),
        "{}",
        text(&out)
    );

    let out = run(&["--profile", "rdna3", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no profile `rdna3`") && stderr(&out).contains("strix-halo"),
        "{}",
        text(&out)
    );

    let out = run(&["--", "rocmguard-no-such-command"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("cannot run `rocmguard-no-such-command`: not found"),
        "{}",
        text(&out)
    );

    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("COMMAND"), "{}", text(&out));

    let out = output(
        cli_command()
            .env("ROCMGUARD_LIB", "/nonexistent/librocmguard.so")
            .args(["run", "true"]),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ROCMGUARD_LIB /nonexistent/librocmguard.so"),
        "{}",
        text(&out)
    );
}

#[test]
fn finds_the_library_in_an_installed_layout() {
    let dir = scratch_dir("cli-run-layout");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::copy(cli(), dir.join("bin/rocmguard")).unwrap();
    std::fs::copy(shim_lib(), dir.join("lib/librocmguard.so")).unwrap();
    let out = output(
        Command::new(dir.join("bin/rocmguard"))
            .env_remove("ROCMGUARD_LIB")
            .env_remove("LD_PRELOAD")
            .args([
                "run",
                "--dry-run",
                "--cap",
                "8GiB",
                "--",
                "python",
                "my script.py",
            ]),
    );
    assert!(out.status.success(), "{}", text(&out));
    let lib = dir.join("lib/librocmguard.so").canonicalize().unwrap();
    assert_eq!(
        stdout(&out),
        format!(
            "LD_PRELOAD={}\nROCMGUARD_VRAM_LIMIT=8GiB\nexec python 'my script.py'\n",
            lib.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_reads_well() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["doctor", "--help"],
        &["stats", "--help"],
    ] {
        let out = output(cli_command().args(args));
        assert!(out.status.success(), "{:?}: {}", args, text(&out));
        let help = stdout(&out);
        assert!(help.contains("Usage: rocmguard"), "{:?}: {}", args, help);
    }
    let top = stdout(&output(cli_command().arg("--help")));
    for sub in ["run", "doctor", "stats"] {
        assert!(top.contains(&format!("  {} ", sub)), "{}", top);
    }
    assert!(
        !top.contains("doctor-probe"),
        "the probe is hidden: {}",
        top
    );
}

#[test]
fn the_docs_list_every_profile_setting_and_key() {
    let docs = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    for p in profiles::builtin() {
        assert!(
            docs.contains(&format!("| `{}` |", p.name)),
            "{} missing from docs/cli.md",
            p.name
        );
        for s in &p.settings {
            let setting = format!("`{}={}`", s.var, s.value);
            assert!(
                docs.contains(&setting),
                "{} of {} missing from docs/cli.md",
                setting,
                p.name
            );
        }
    }
    for key in KEYS {
        assert!(
            docs.contains(&format!("`{}`", key.var())),
            "{} missing from docs/cli.md",
            key.var()
        );
    }
}

/// A cap the user asked for but wrote wrongly stops `run` (and `--dry-run`) before the program
/// starts, wherever it came from: an option, an inherited variable, or the ROCMGUARD_CONF line.
#[test]
fn an_invalid_cap_stops_before_the_program_starts() {
    let dir = scratch_dir("invalid_cap");
    let mark = dir.join("ran");
    let touch = format!("touch {}", mark.display());
    let inherited = [
        ("ROCMGUARD_VRAM_LIMIT", "banana"),
        ("ROCMGUARD_VRAM_LIMIT", "-5GiB"),
        ("ROCMGUARD_VRAM_LIMIT", "200%"),
        ("ROCMGUARD_CONF", "vram_limit:banana"),
    ];
    for (var, value) in inherited {
        for dry in [false, true] {
            let mut cmd = cli_command();
            cmd.env(var, value).env("ROCMGUARD_LOG", "off").arg("run");
            if dry {
                cmd.arg("--dry-run");
            }
            let out = output(cmd.args(["--", "sh", "-c", &touch]));
            assert_eq!(
                out.status.code(),
                Some(2),
                "{}={}: {}",
                var,
                value,
                text(&out)
            );
            let err = stderr(&out);
            assert_eq!(err.lines().count(), 1, "said once: {}", err);
            assert!(
                err.contains(value) && err.contains("ROCMGUARD_VRAM_LIMIT=20GiB"),
                "key, value, an example: {}",
                err
            );
            assert!(stdout(&out).is_empty(), "{}", text(&out));
            assert!(!mark.exists(), "{}={} started the program", var, value);
        }
    }
    let out = run(&["--cap", "banana", "--", "sh", "-c", &touch]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(!mark.exists());
    // `--cap "$CAP"` with CAP unset or blank, and a cap that starts with a minus: refused as a
    // cap, named as one, never run without a cap nor read as an unknown option.
    for bad in ["", " ", "-5GiB"] {
        let out = run(&["--cap", bad, "--", "sh", "-c", &touch]);
        assert_eq!(out.status.code(), Some(2), "{:?}: {}", bad, text(&out));
        let err = stderr(&out);
        assert!(
            err.contains("--cap") && !err.contains("unknown option"),
            "{:?}: {}",
            bad,
            err
        );
        assert!(!mark.exists(), "--cap {:?} started the program", bad);
    }
    let err = stderr(&run(&["--cap", "", "--", "true"]));
    assert!(err.contains("empty"), "{}", err);
    // The same empty cap from the variable and from the ROCMGUARD_CONF line.
    for (var, value) in [
        ("ROCMGUARD_VRAM_LIMIT", ""),
        ("ROCMGUARD_CONF", "vram_limit:"),
    ] {
        let out = output(
            cli_command()
                .env(var, value)
                .args(["run", "--", "sh", "-c", &touch]),
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}={:?}: {}",
            var,
            value,
            text(&out)
        );
        assert!(stderr(&out).contains("empty"), "{}", text(&out));
        assert!(!mark.exists(), "{}={:?} started the program", var, value);
    }
    // An option with a good cap replaces a bad inherited one.
    let out = output(cli_command().env("ROCMGUARD_VRAM_LIMIT", "banana").args([
        "run",
        "--cap",
        "1GiB",
        "--dry-run",
        "--",
        "true",
    ]));
    assert!(out.status.success(), "{}", text(&out));
}

/// `0` and `0%` are both accepted and mean the same: no device memory.
#[test]
fn zero_and_zero_percent_are_both_caps() {
    for zero in ["0", "0%"] {
        let out = run(&["--cap", zero, "--dry-run", "--", "true"]);
        assert!(out.status.success(), "{}: {}", zero, text(&out));
    }
}

/// An unknown option before the command is refused, naming the option it resembles; it is never
/// run as the command.
#[test]
fn unknown_options_are_refused_with_a_suggestion() {
    let out = run(&["--cpa", "4GiB", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("unknown option `--cpa`") && err.contains("did you mean `--cap`?"),
        "{}",
        err
    );
    assert!(!err.contains("cannot run"), "{}", err);
    let out = run(&["--frobnicate", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("unknown option `--frobnicate`"),
        "{}",
        text(&out)
    );
    // The command's own options after it, or after `--`, are still the command's.
    let out = run(&["--dry-run", "ls", "-la"]);
    assert!(stdout(&out).contains("exec ls -la"), "{}", text(&out));
    let out = run(&["--dry-run", "--", "--weird"]);
    assert!(stdout(&out).contains("exec --weird"), "{}", text(&out));
}

/// `rocmguard run --sim` runs a program on hipsim, under the guard, after `cargo build
/// --release` alone: a program linked against the runtime's soname and one that opens
/// `libamdhip64.so` by name (Python's ctypes) both get the simulator and the capped device.
#[test]
fn sim_runs_a_program_on_the_simulated_runtime() {
    // 3 x 3 MiB asked of a 16 GiB simulated device under a cap of 8 MiB.
    let exe = compile_c(
        "cli_run_refusals",
        &["guard_refusals.c"],
        &["-lamdhip64", "-ldl", "-pthread"],
    );
    let exe = exe.display().to_string();
    let out = run(&["--sim", "--cap", "8MiB", "--", &exe, "3", "3"]);
    assert!(out.status.success(), "{}", text(&out));
    let seen = stdout(&out);
    assert!(seen.contains("granted 2\nrefused 1"), "{}", text(&out));
    assert!(
        stderr(&out).contains("SIMULATED HIP runtime"),
        "{}",
        text(&out)
    );
    // A cap of 0 refuses everything, and says so once at start with the way to have none.
    let out = run(&["--sim", "--cap", "0", "--", &exe, "3", "3"]);
    assert!(
        stdout(&out).contains("granted 0\nrefused 3"),
        "{}",
        text(&out)
    );
    let said = stderr(&out).matches("ROCMGUARD_VRAM_LIMIT=none").count();
    assert_eq!(said, 1, "{}", text(&out));

    let probe = "import ctypes\n\
        hip = ctypes.CDLL('libamdhip64.so')\n\
        free, total = ctypes.c_size_t(), ctypes.c_size_t()\n\
        print(hip.hipMemGetInfo(ctypes.byref(free), ctypes.byref(total)), total.value)";
    let out = run(&["--sim", "--cap", "1GiB", "--", "python3", "-c", probe]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!("0 {}", 1u64 << 30),
        "{}",
        text(&out)
    );
}
