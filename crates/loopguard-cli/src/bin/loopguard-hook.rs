//! `loopguard-hook AGENT`: `loopguard hook AGENT` alone, in a binary that links only what
//! the hook uses, because agents start it once per tool call and wait for it.

fn main() -> std::process::ExitCode {
    loopguard_cli::hook_main()
}
