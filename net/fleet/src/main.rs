//! `migratory-fleet`: one world server process per world, on demand (see `cli`).

fn main() -> std::process::ExitCode {
    migratory_fleet::cli::main()
}
