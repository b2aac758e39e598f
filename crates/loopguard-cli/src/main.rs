//! `loopguard`: every command (see the library).

fn main() -> std::process::ExitCode {
    loopguard_cli::main()
}
