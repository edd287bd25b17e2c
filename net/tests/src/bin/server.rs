//! `migratory-server` as the tests run it: the program's own entry point (and a way to
//! run it as a build of the kernel's synthetic next rules).

fn main() -> std::process::ExitCode {
    // MIGRATORY_SYNTHETIC_RULES=1 makes this test program a build of the kernel's
    // synthetic next rules (the rules-change tests run an "old" and a "new" build).
    if std::env::var_os("MIGRATORY_SYNTHETIC_RULES").is_some_and(|v| v == "1") {
        migratory_kernel::follow_synthetic_rules_everywhere(true);
    }
    migratory_server::cli::main()
}
