//! `migratory-bots` as the tests run it: the program's own entry point.

fn main() -> std::process::ExitCode {
    migratory_bots::cli::main()
}
