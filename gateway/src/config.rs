//! Configuration loading: the compiled-in defaults ([`DEFAULT_CONFIG_TOML`]), then an optional
//! file, then `HIREGATE_*` environment variables, validated into the engine's
//! [`Settings`]. What each key means and which values pass is the engine's
//! ([`hiregate_engine::settings`]); where the values come from is the binary's.

use std::path::Path;

use figment::{
    Figment,
    providers::{Env, Format, Toml},
};

pub use hiregate_engine::settings::{ConfigError, DEFAULT_CONFIG_TOML, Settings};

/// Prefix of the environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "HIREGATE_";

/// `HIREGATE_*` variables that belong to something else than the configuration, lower-cased and
/// without the prefix: `HIREGATE_CONFIG` names the file, `HIREGATE_TEST_DATABASE_URL` belongs to
/// the test suite, the others to the client commands (`hiregate seeker`, `hiregate mcp`). A shell
/// that exports them for a seeker can still run `hiregate serve`.
pub const NOT_CONFIG_KEYS: &[&str] = &[
    "config",
    "test_database_url",
    "gateway_url",
    "seeker_key",
    // The former name of HIREGATE_SEEKER_KEY, still read by `hiregate seeker`.
    "api_key",
    "seeker_wallet_key_file",
    "seeker_max_price",
];

/// The layering without validation: defaults, then `config_file` (if any), then the
/// `HIREGATE_*` environment, except the variables in [`NOT_CONFIG_KEYS`].
pub fn figment(config_file: Option<&Path>) -> Result<Figment, ConfigError> {
    let mut figment = Figment::from(Toml::string(DEFAULT_CONFIG_TOML));
    if let Some(path) = config_file {
        if !path.is_file() {
            return Err(ConfigError::MissingFile {
                path: path.to_path_buf(),
            });
        }
        figment = figment.merge(Toml::file_exact(path));
    }
    Ok(figment.merge(
        Env::prefixed(ENV_PREFIX)
            .ignore(NOT_CONFIG_KEYS)
            // Lower-case, so errors name keys as they are written in the TOML files.
            .map(|key| key.as_str().to_ascii_lowercase().into())
            .split("__"),
    ))
}

/// Load all layers and validate.
pub fn load(config_file: Option<&Path>) -> Result<Settings, ConfigError> {
    Settings::from_figment(&figment(config_file)?)
}
