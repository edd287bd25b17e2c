//! The fleet end to end, with real processes: `migratory-fleet` runs real world servers,
//! real WebSocket clients join them, and every scenario runs once on SQLite and once on a
//! throwaway PostgreSQL cluster started from Debian's server binaries.

mod access;
mod allocation;
mod harness;
mod moves;
mod nodes;
mod prometheus;
mod scenarios;
mod upgrade;

pub use harness::Backend;

/// One test per scenario and backend.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::scenarios::$name(super::Backend::Sqlite) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::scenarios::$name(super::Backend::Postgres) } )*
        }
    };
}

on_both_backends!(
    worlds_are_created_validated_and_joined,
    two_first_joins_start_one_server,
    tokens_read_only_their_own_world_while_their_process_lives,
    a_server_that_exits_early_is_a_503_with_its_log_tail,
    a_server_never_ready_is_killed_and_the_join_is_a_503,
    an_idle_world_is_stopped_and_the_next_join_continues_it,
    after_a_sigkill_the_next_join_resumes_at_the_recorded_root,
    a_killed_fleet_takes_its_servers_down_and_a_new_one_resumes,
    answers_are_json_and_any_valid_id_runs,
    a_join_resets_the_idle_clock,
    limits_refuse_big_worlds_and_cap_the_running_ones,
    every_call_needs_a_token_of_its_role,
    open_joins_are_rate_limited_and_tokens_come_from_the_environment,
    a_server_that_stops_answering_is_replaced,
    unknown_joins_keep_nothing_and_metrics_and_discovery_tell_the_rest,
    a_world_crosses_a_rules_change_by_replay_or_fork,
    a_bookmark_is_listed_and_opens_the_worlds_replay,
);
