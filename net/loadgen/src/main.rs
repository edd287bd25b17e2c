//! `migratory-bots`: the load generator and the soak (see `cli`).

fn main() -> std::process::ExitCode {
    migratory_bots::cli::main()
}
