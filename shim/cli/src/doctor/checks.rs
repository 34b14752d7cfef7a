//! The doctor's checks, in the order they are printed: the guard and the ROCm libraries, the
//! driver and each GPU, memory, module parameters, the environment, PyTorch, the self-test.
//! One file per group beside this one: `installation.rs` (the guard, the libraries),
//! `hardware.rs` (driver, GPUs, memory, parameters, RAM), `targets.rs` (gfx override, XNACK),
//! `settings.rs` (allocator variables, caps, ROCMGUARD_*), `pytorch.rs`, `self_test.rs`.

use rocmguard_core::Config;

use super::{Check, Context};

mod hardware;
mod installation;
mod pytorch;
mod recipes;
mod self_test;
mod settings;
mod targets;

use hardware::{driver, gpus, params, ram};
use installation::{libraries, shim};
pub use pytorch::pytorch;
pub use self_test::self_test;
use settings::{caps, no_caching, pytorch_alloc_conf, rocmguard_env};
use targets::{gfx_override, xnack};

/// The checks that need nothing but the context (PyTorch and the self-test run processes and
/// are added by the caller).
pub fn all(ctx: &Context) -> Vec<Check> {
    let mut out = vec![shim(ctx)];
    out.extend(libraries(ctx));
    out.push(driver(ctx));
    out.extend(gpus(ctx));
    out.push(params(ctx));
    out.push(ram(ctx));
    out.push(gfx_override(ctx));
    out.push(pytorch_alloc_conf(ctx));
    out.push(no_caching(ctx));
    out.push(recipes::recipe_vars(ctx));
    out.push(caps(ctx));
    out.push(rocmguard_env(ctx));
    out.push(xnack(ctx));
    out
}

/// The guard's configuration as the environment sets it.
pub fn config(ctx: &Context) -> Config {
    Config::from_vars(ctx.env.iter()).0
}
