//! `migratory-server`: runs a live world (`serve`), prints the default config, or opens
//! the browser viewer on a recording (`view`). See `cli` for the commands.

fn main() -> std::process::ExitCode {
    migratory_server::cli::main()
}
