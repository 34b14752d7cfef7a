//! Logging through `tracing` to stderr (and `ROCMGUARD_LOG_FILE`), on a dispatcher of our own
//! so a Rust host program's global subscriber is never replaced or used.

use std::fmt::Arguments;
use std::io::Write;
use std::sync::Arc;

use once_cell::sync::OnceCell;
use rocmguard_core::Config;
use tracing::Dispatch;

static DISPATCH: OnceCell<Dispatch> = OnceCell::new();

/// Sets up the dispatcher from the configuration and prints bad-value warnings, once.
pub fn init(config: &Config, warnings: &[String]) {
    DISPATCH.get_or_init(|| {
        let level = match config.log.as_str() {
            "off" => None,
            "error" => Some(tracing::Level::ERROR),
            "info" => Some(tracing::Level::INFO),
            "debug" => Some(tracing::Level::DEBUG),
            "trace" => Some(tracing::Level::TRACE),
            _ => Some(tracing::Level::WARN),
        };
        // Opened once; every line is appended to the same handle.
        let file = config.log_file.as_ref().and_then(|path| {
            match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    eprintln!(
                        "rocmguard: cannot open the log file {}: {}; logging to stderr only",
                        path, e
                    );
                    None
                }
            }
        });
        let writer = move || -> Box<dyn Write> {
            match &file {
                Some(f) => Box::new(Tee(std::io::stderr(), f.clone())),
                None => Box::new(std::io::stderr()),
            }
        };
        let builder = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_target(false)
            .without_time()
            .with_ansi(false);
        match level {
            Some(l) => Dispatch::new(builder.with_max_level(l).finish()),
            None => Dispatch::none(),
        }
    });
    for w in warnings {
        warn(format_args!("{}", w.trim_start_matches("rocmguard: ")));
    }
    // A cap that could not be read is said even with the log off: the program gets no memory.
    if let Some(e) = &config.invalid_cap {
        if config.log == "off" {
            eprintln!("rocmguard: error: {}", e);
        } else {
            error(format_args!("{}", e));
        }
    }
}

struct Tee(std::io::Stderr, Arc<std::fs::File>);

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = (&*self.1).write_all(buf);
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let _ = (&*self.1).flush();
        self.0.flush()
    }
}

fn with(f: impl FnOnce()) {
    if let Some(d) = DISPATCH.get() {
        tracing::dispatcher::with_default(d, f);
    }
}

pub fn error(args: Arguments) {
    with(|| tracing::error!("rocmguard: {}", args));
}

pub fn warn(args: Arguments) {
    with(|| tracing::warn!("rocmguard: {}", args));
}

pub fn info(args: Arguments) {
    with(|| tracing::info!("rocmguard: {}", args));
}

/// The one line printed at first use, whatever the level (unless the log is off).
pub fn first_use(face: &str, config: &Config) {
    if config.log != "off" {
        let line = format!(
            "rocmguard {}: guarding {} device memory | {}",
            env!("CARGO_PKG_VERSION"),
            face,
            config.summary()
        );
        eprintln!("{}", line);
    }
}
