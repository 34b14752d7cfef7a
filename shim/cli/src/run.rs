//! `rocmguard run`.

#[derive(clap::Args)]
pub struct Args {}

pub fn exec(_args: Args) -> anyhow::Result<u8> {
    anyhow::bail!("`rocmguard run` is not built yet")
}
