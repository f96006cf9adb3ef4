//! The `hiregate` binary: configuration layering and errors that name the key, `migrate`,
//! `keys create` and `facilitator` (`demo` has its own tests).

use std::process::{Command, Output};

use serde_json::Value;

use crate::helpers::{TestDatabase, spawn_app_on};

fn hiregate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hiregate"));
    command.args(args);
    // Only what the test sets: nothing inherited may change the configuration.
    for (name, _) in std::env::vars() {
        if name.starts_with("HIREGATE_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    command.output().expect("run hiregate")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn environment_type_errors_name_the_key() {
    let output = hiregate(
        &["check-config"],
        &[("HIREGATE_DATABASE__MAX_CONNECTIONS", "abc")],
    );
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("database.max_connections"), "{message}");
}

#[test]
fn environment_rule_errors_name_the_key() {
    let output = hiregate(
        &["check-config"],
        &[("HIREGATE_HEALTH__MISS_THRESHOLD", "0")],
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("health.miss_threshold"),
        "{}",
        stderr(&output)
    );

    let output = hiregate(&["check-config"], &[("HIREGATE_HTTP__NO_SUCH_KEY", "1")]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no_such_key"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn file_layer_errors_name_the_key_and_env_wins_over_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, "[facilitator]\nmode = \"http\"\n").unwrap();
    let path = file.to_str().unwrap();

    let output = hiregate(&["check-config", "--config", path], &[]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("facilitator.url"),
        "{}",
        stderr(&output)
    );

    let output = hiregate(&["check-config"], &[("HIREGATE_CONFIG", path)]);
    assert!(
        stderr(&output).contains("facilitator.url"),
        "{}",
        stderr(&output)
    );

    let output = hiregate(
        &["check-config", "--config", path],
        &[("HIREGATE_FACILITATOR__URL", "https://facilitator.example")],
    );
    assert!(output.status.success(), "{}", stderr(&output));

    let output = hiregate(
        &["check-config", "--config", "/nonexistent/hiregate.toml"],
        &[],
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("does not exist"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn check_config_never_prints_secrets() {
    let secret = "admin-secret-that-must-not-leak-0123456789";
    let output = hiregate(
        &["check-config"],
        &[
            ("HIREGATE_ADMIN__API_KEY", secret),
            (
                "HIREGATE_DATABASE__URL",
                "postgres://app:db-password-xyz@db.example/hg",
            ),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("api_key"), "{stdout}");
    assert!(!stdout.contains(secret), "{stdout}");
    assert!(!stdout.contains("db-password-xyz"), "{stdout}");
}

#[tokio::test]
async fn migrate_and_keys_create_produce_a_working_key() {
    let database = TestDatabase::sqlite();
    let url = database.url();
    let env = [("HIREGATE_DATABASE__URL", url.as_str())];

    let output = hiregate(&["migrate"], &env);
    assert!(output.status.success(), "{}", stderr(&output));

    let output = hiregate(
        &["keys", "create", "--role", "operator", "--label", "cli"],
        &env,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let created: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let key = created["api_key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("hg_op_"));
    assert_eq!(created["role"], "operator");

    let bad = hiregate(&["keys", "create", "--role", "admin"], &env);
    assert!(!bad.status.success());

    // The gateway on the same database accepts the key (404 for an unknown worker, not 401).
    let app = spawn_app_on(database, "").await;
    let response = app
        .get("/v1/workers/wk_01J00000000000000000000000", Some(&key))
        .await;
    assert_eq!(response.status(), 404);
}

#[test]
fn facilitator_without_chains_names_the_problem() {
    let output = hiregate(&["facilitator"], &[]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("[chains]"), "{}", stderr(&output));
}

#[test]
fn the_production_example_config_is_accepted() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/hiregate.production.toml"
    );
    let admin_key = "production-admin-key-0123456789abcdefghij";
    let output = hiregate(
        &["check-config", "--config", example],
        &[
            (
                "HIREGATE_DATABASE__URL",
                "postgres://hiregate:db-secret-pw@db.internal:5432/hiregate",
            ),
            ("HIREGATE_ADMIN__API_KEY", admin_key),
            (
                "HIREGATE_FACILITATOR__AUTH_HEADER_VALUE",
                "Bearer fac-token-123",
            ),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "gateway.example.com",
        "facilitator.example.com",
        "Http",
        "eip155:8453",
        "/var/lib/hiregate/keys/signing-key.json",
    ] {
        assert!(printed.contains(expected), "{expected} in {printed}");
    }
    for secret in [admin_key, "db-secret-pw", "fac-token-123"] {
        assert!(!printed.contains(secret), "{secret} printed");
    }
}

#[test]
fn serve_help_names_the_production_example() {
    let output = hiregate(&["serve", "--help"], &[]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("deploy/hiregate.production.toml"), "{help}");
}

#[tokio::test]
async fn healthcheck_follows_healthz() {
    let app = crate::helpers::spawn_app().await;
    let run = |url: String| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_hiregate"))
            .args(["healthcheck", "--url", &url])
            .output()
            .await
            .expect("run hiregate healthcheck")
    };
    let up = run(format!("{}/healthz", app.address)).await;
    assert!(up.status.success(), "{}", stderr(&up));
    let port = crate::helpers::closed_port().await;
    let down = run(format!("http://127.0.0.1:{port}/healthz")).await;
    assert!(!down.status.success());
    let missing = run(format!("{}/no-such-route", app.address)).await;
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("404"), "{}", stderr(&missing));
}

/// A shell set up for `hiregate seeker` (as the README's walkthrough sets one up) can still run
/// the gateway: the client commands' variables are not configuration keys.
#[test]
fn the_client_commands_variables_are_not_configuration_keys() {
    let output = hiregate(
        &["check-config"],
        &[
            ("HIREGATE_GATEWAY_URL", "http://127.0.0.1:8402/"),
            ("HIREGATE_SEEKER_KEY", "hg_sk_not_a_config_key"),
            ("HIREGATE_API_KEY", "hg_sk_not_a_config_key_either"),
            ("HIREGATE_SEEKER_WALLET_KEY_FILE", "/nowhere/wallet.key"),
            ("HIREGATE_SEEKER_MAX_PRICE", "2"),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(!printed.contains("hg_sk_not_a_config_key"), "{printed}");
}

/// Every command that talks to a gateway by default talks to the address the gateway listens on
/// by default.
#[test]
fn the_default_gateway_url_of_every_command_is_the_default_listen_address() {
    let defaults = hiregate_engine::settings::Settings::from_defaults_and("").unwrap();
    let listen = defaults.http.listen_address.to_string();
    for command in [
        &["healthcheck", "--help"][..],
        &["seeker", "--help"],
        &["mcp", "--help"],
    ] {
        let output = hiregate(command, &[]);
        assert!(output.status.success(), "{command:?}: {}", stderr(&output));
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(
            help.contains(&format!("http://{listen}/")),
            "{command:?} should default to http://{listen}/:\n{help}"
        );
    }
}
