//! A progress bar on stderr, shown only on a terminal and only for runs that take more than a
//! second: `replay` and `tune` step it once per replay.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr for runs that take more than a second, and only on a terminal:
/// reading the files, then one step per trace and policy.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// No bar at all.
    pub fn none() -> Progress {
        Progress(None)
    }

    /// A bar that stays hidden for its first second.
    pub fn stderr() -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template("{elapsed:>4} {spinner} {msg}") {
            bar.set_style(style);
        }
        let late = bar.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            if !late.is_finished() {
                late.set_draw_target(ProgressDrawTarget::stderr());
                late.enable_steady_tick(Duration::from_millis(200));
            }
        });
        Progress(Some(bar))
    }

    /// The files are read: from here on the bar counts `steps` replays.
    pub fn start(&self, steps: u64) {
        if let Some(bar) = &self.0 {
            bar.set_length(steps);
            if let Ok(style) =
                ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
        }
    }

    pub fn message(&self, text: &str) {
        if let Some(bar) = &self.0 {
            bar.set_message(text.to_string());
        }
    }

    pub fn step(&self) {
        if let Some(bar) = &self.0 {
            bar.inc(1);
        }
    }
}

/// Gone from the terminal before the table or an error is printed.
impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
