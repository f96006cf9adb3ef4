//! [`Settings::validate`]: the rules serde cannot express, each refusal naming its key.

use std::collections::BTreeSet;
use std::time::Duration;

use secrecy::ExposeSecret;
use url::Url;

use super::*;

impl Settings {
    /// Rules serde cannot express. The first broken rule is reported, by key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_http()?;
        self.validate_database()?;
        self.validate_facilitator()?;
        self.validate_chains()?;
        self.validate_rest()
    }

    fn validate_http(&self) -> Result<(), ConfigError> {
        let http = &self.http;
        if let Some(url) = &http.public_base_url {
            check_http_url("http.public_base_url", url)?;
            if url.query().is_some() || url.fragment().is_some() {
                return Err(ConfigError::invalid(
                    "http.public_base_url",
                    "must not have a query or fragment",
                ));
            }
        }
        at_least("http.request_timeout_s", http.request_timeout_s, 1)?;
        at_least("http.body_limit_bytes", http.body_limit_bytes as u64, 1024)?;
        let origins = &http.cors_allowed_origins;
        if origins.iter().any(|o| o == "*") && origins.len() > 1 {
            return Err(ConfigError::invalid(
                "http.cors_allowed_origins",
                "\"*\" must be the only entry when present",
            ));
        }
        for origin in origins.iter().filter(|o| *o != "*") {
            let parsed = Url::parse(origin).map_err(|e| {
                ConfigError::invalid(
                    "http.cors_allowed_origins",
                    format!("`{origin}` is not an origin: {e}"),
                )
            })?;
            if parsed.origin().ascii_serialization() != origin.trim_end_matches('/') {
                return Err(ConfigError::invalid(
                    "http.cors_allowed_origins",
                    format!("`{origin}` must be scheme://host[:port] with no path"),
                ));
            }
        }
        Ok(())
    }

    fn validate_database(&self) -> Result<(), ConfigError> {
        let db = &self.database;
        at_least("database.max_connections", u64::from(db.max_connections), 1)?;
        if db.min_connections > db.max_connections {
            return Err(ConfigError::invalid(
                "database.min_connections",
                "must not exceed database.max_connections",
            ));
        }
        at_least("database.acquire_timeout_s", db.acquire_timeout_s, 1)
    }

    fn validate_facilitator(&self) -> Result<(), ConfigError> {
        let f = &self.facilitator;
        at_least("facilitator.verify_timeout_ms", f.verify_timeout_ms, 1)?;
        at_least("facilitator.settle_timeout_ms", f.settle_timeout_ms, 1)?;
        if f.auth_header_value.is_some() {
            reqwest::header::HeaderName::from_bytes(f.auth_header_name.as_bytes()).map_err(
                |_| ConfigError::invalid("facilitator.auth_header_name", "not a valid header name"),
            )?;
            let value = f.auth_header_value.as_ref().map(|v| v.expose_secret());
            if value.is_some_and(|v| reqwest::header::HeaderValue::from_str(v).is_err()) {
                // The value itself stays out of the message: it is a secret.
                return Err(ConfigError::invalid(
                    "facilitator.auth_header_value",
                    "not a valid header value",
                ));
            }
        }
        match (f.mode, &f.url) {
            (FacilitatorMode::Http, None) => Err(ConfigError::invalid(
                "facilitator.url",
                "required when facilitator.mode = \"http\"",
            )),
            (FacilitatorMode::Http, Some(url)) => check_http_url("facilitator.url", url),
            (FacilitatorMode::Embedded, _) => Ok(()),
        }
    }

    fn validate_chains(&self) -> Result<(), ConfigError> {
        let mut networks = BTreeSet::new();
        for (name, chain) in &self.chains {
            let key = |field: &str| format!("chains.{name}.{field}");
            if !networks.insert(chain.network) {
                return Err(ConfigError::invalid(
                    key("network"),
                    format!("`{}` is configured twice", chain.network),
                ));
            }
            // The facilitator and the token reader speak JSON-RPC over HTTP.
            if !matches!(chain.rpc_url.scheme(), "http" | "https") {
                return Err(ConfigError::invalid(
                    key("rpc_url"),
                    "scheme must be http or https",
                ));
            }
            let mut seen = BTreeSet::new();
            for (index, token) in chain.tokens.iter().enumerate() {
                let field = |f: &str| format!("chains.{name}.tokens[{index}].{f}");
                if !seen.insert(token.address) {
                    return Err(ConfigError::invalid(field("address"), "listed twice"));
                }
                let needs_version = token.transfer_method == TransferMethod::Eip3009;
                if token.name.is_empty()
                    || (needs_version && token.version.is_empty())
                    || token.symbol.is_empty()
                {
                    return Err(ConfigError::invalid(
                        field("name"),
                        "name, version and symbol must not be empty (version may be for a \
                         permit2 token)",
                    ));
                }
                if token.decimals > 77 {
                    return Err(ConfigError::invalid(field("decimals"), "at most 77"));
                }
            }
            if chain.relayer_private_key.is_none()
                && self.facilitator.mode == FacilitatorMode::Embedded
            {
                return Err(ConfigError::invalid(
                    key("relayer_private_key"),
                    "required when facilitator.mode = \"embedded\"",
                ));
            }
            if chain.operator_private_key.is_some() && self.escrow.treasury.is_none() {
                return Err(ConfigError::invalid(
                    "escrow.treasury",
                    format!(
                        "required when chains.{name}.operator_private_key is set: escrowed \
                         contracts name it as their fee recipient"
                    ),
                ));
            }
            for (field, address) in [
                ("auth_capture_escrow", chain.auth_capture_escrow),
                ("erc3009_token_collector", chain.erc3009_token_collector),
                ("operator_refund_collector", chain.operator_refund_collector),
            ] {
                if address.is_zero() {
                    return Err(ConfigError::invalid(
                        key(field),
                        "must not be the zero address",
                    ));
                }
            }
        }
        self.validate_escrow()
    }

    fn validate_escrow(&self) -> Result<(), ConfigError> {
        let escrow = &self.escrow;
        if escrow.treasury.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::invalid(
                "escrow.treasury",
                "must not be the zero address (leave it empty for no escrow)",
            ));
        }
        if escrow.max_fee_bps > hiregate_contracts::escrow::MAX_FEE_BPS {
            return Err(ConfigError::invalid("escrow.max_fee_bps", "at most 10000"));
        }
        if escrow.default_fee_bps > escrow.max_fee_bps {
            return Err(ConfigError::invalid(
                "escrow.default_fee_bps",
                "must not exceed escrow.max_fee_bps",
            ));
        }
        // The seed's long-running bound: HIRE polls pending work for up to 24 hours.
        if escrow.max_pending_s > hiregate_contracts::terms::Sla::MAX_POLL_WINDOW_S {
            return Err(ConfigError::invalid(
                "escrow.max_pending_s",
                format!(
                    "at most {} (24 h)",
                    hiregate_contracts::terms::Sla::MAX_POLL_WINDOW_S
                ),
            ));
        }
        if escrow.max_acceptance_window_s
            > hiregate_contracts::terms::TermsLimits::default().max_acceptance_window_s
        {
            return Err(ConfigError::invalid(
                "escrow.max_acceptance_window_s",
                "at most 30 days",
            ));
        }
        at_least("escrow.payment_window_s", escrow.payment_window_s, 30)?;
        at_least("escrow.capture_margin_s", escrow.capture_margin_s, 60)?;
        // The deadline sweep acts `settlement_margin_s` before an escrowed payment's capture
        // deadline; a smaller capture margin would let it capture inside the seeker's window.
        if escrow.capture_margin_s <= self.contracts.settlement_margin_s {
            return Err(ConfigError::invalid(
                "escrow.capture_margin_s",
                "must exceed contracts.settlement_margin_s, or the deadline sweep would capture \
                 before an escrowed contract's acceptance window ends",
            ));
        }
        Ok(())
    }

    /// The longest a settlement may take when the instance running it dies at the worst
    /// moment: its `/settle` runs out its timeout, the contract turns stale after the same
    /// timeout plus the recovery grace, the next job round (one interval later) takes it over,
    /// asks the chain and calls `/settle` once more, which may take the timeout again.
    pub fn worst_case_settlement_recovery(&self) -> Duration {
        let settle = self.facilitator.settle_timeout();
        settle * 2 + self.contracts.recovery_grace() + self.contracts.jobs_interval()
    }

    fn validate_mcp(&self) -> Result<(), ConfigError> {
        let mcp = &self.mcp;
        if mcp.max_sessions == 0 {
            return Err(ConfigError::invalid(
                "mcp.max_sessions",
                "must be at least 1 (0 would refuse every MCP client)",
            ));
        }
        if mcp.wallet_private_key.is_none() {
            return Ok(());
        }
        if mcp.max_per_hire == 0 {
            return Err(ConfigError::invalid(
                "mcp.max_per_hire",
                "must be above 0 when mcp.wallet_private_key is set",
            ));
        }
        if mcp.max_per_day < mcp.max_per_hire {
            return Err(ConfigError::invalid(
                "mcp.max_per_day",
                "must be at least mcp.max_per_hire",
            ));
        }
        Ok(())
    }

    fn validate_rest(&self) -> Result<(), ConfigError> {
        self.validate_webhooks_and_events()?;
        self.validate_mcp()?;
        if let Some(path) = &self.signing_key.path
            && path.exists()
            && !path.is_file()
        {
            return Err(ConfigError::invalid(
                "signing_key.path",
                format!("`{}` exists but is not a file", path.display()),
            ));
        }
        if let Some(key) = &self.admin.api_key
            && key.expose_secret().chars().count() < 32
        {
            return Err(ConfigError::invalid(
                "admin.api_key",
                "must be at least 32 characters",
            ));
        }
        let out = &self.outbound;
        at_least("outbound.connect_timeout_ms", out.connect_timeout_ms, 1)?;
        at_least("outbound.request_timeout_ms", out.request_timeout_ms, 1)?;
        at_least(
            "outbound.max_response_bytes",
            out.max_response_bytes as u64,
            1024,
        )?;
        at_least(
            "outbound.stream_max_bytes",
            out.stream_max_bytes as u64,
            1024,
        )?;
        at_least(
            "outbound.stream_max_duration_ms",
            out.stream_max_duration_ms,
            100,
        )?;
        let health = &self.health;
        at_least("health.interval_ms", health.interval_ms, 10)?;
        at_least("health.miss_threshold", u64::from(health.miss_threshold), 1)?;
        at_least("health.probe_timeout_ms", health.probe_timeout_ms, 1)?;
        let contracts = &self.contracts;
        at_least(
            "contracts.max_authorization_window_s",
            contracts.max_authorization_window_s,
            60,
        )?;
        at_least("contracts.offer_ttl_s", contracts.offer_ttl_s, 1)?;
        at_least("contracts.poll_interval_ms", contracts.poll_interval_ms, 10)?;
        at_least(
            "contracts.poll_max_interval_ms",
            contracts.poll_max_interval_ms,
            contracts.poll_interval_ms,
        )?;
        at_least(
            "contracts.callback_tolerance_s",
            contracts.callback_tolerance_s,
            1,
        )?;
        at_least("contracts.jobs_interval_ms", contracts.jobs_interval_ms, 10)?;
        at_least("contracts.job_lease_ms", contracts.job_lease_ms, 1000)?;
        if contracts.offer_ttl_s > 7 * 24 * 3600 {
            return Err(ConfigError::invalid(
                "contracts.offer_ttl_s",
                "must be at most 604800 (7 days)",
            ));
        }
        at_least(
            "contracts.settlement_margin_s",
            contracts.settlement_margin_s,
            10,
        )?;
        at_least(
            "contracts.sweep_interval_ms",
            contracts.sweep_interval_ms,
            10,
        )?;
        at_least(
            "contracts.recovery_grace_ms",
            contracts.recovery_grace_ms,
            100,
        )?;
        let recovery = self.worst_case_settlement_recovery();
        if Duration::from_secs(contracts.settlement_margin_s) < recovery {
            return Err(ConfigError::invalid(
                "contracts.settlement_margin_s",
                format!(
                    "must be at least {} s: a settlement begun at the margin by an instance \
                     that then dies is resumed by another within 2 × \
                     facilitator.settle_timeout_ms + contracts.recovery_grace_ms + \
                     contracts.jobs_interval_ms, all before validBefore",
                    recovery.as_secs_f64().ceil()
                ),
            ));
        }
        if contracts.default_acceptance_window_s >= contracts.max_authorization_window_s {
            return Err(ConfigError::invalid(
                "contracts.default_acceptance_window_s",
                "must be shorter than contracts.max_authorization_window_s, or settlement \
                 could not happen before the authorization expires",
            ));
        }
        Ok(())
    }
}

fn at_least(key: &str, value: u64, min: u64) -> Result<(), ConfigError> {
    if value < min {
        return Err(ConfigError::invalid(
            key,
            format!("must be at least {min} (got {value})"),
        ));
    }
    Ok(())
}

fn check_http_url(key: &str, url: &Url) -> Result<(), ConfigError> {
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(ConfigError::invalid(
            key,
            "must be an http(s) URL with a host",
        ));
    }
    Ok(())
}

impl Settings {
    fn validate_webhooks_and_events(&self) -> Result<(), ConfigError> {
        let hooks = &self.webhooks;
        at_least("webhooks.poll_interval_ms", hooks.poll_interval_ms, 10)?;
        at_least("webhooks.batch_size", u64::from(hooks.batch_size), 1)?;
        at_least("webhooks.request_timeout_ms", hooks.request_timeout_ms, 1)?;
        at_least("webhooks.max_attempts", u64::from(hooks.max_attempts), 1)?;
        at_least("webhooks.backoff_initial_ms", hooks.backoff_initial_ms, 1)?;
        at_least(
            "webhooks.backoff_max_ms",
            hooks.backoff_max_ms,
            hooks.backoff_initial_ms,
        )?;
        // A lease that ran out mid-request would let another instance send the same try.
        at_least(
            "webhooks.lease_ms",
            hooks.lease_ms,
            hooks.request_timeout_ms.saturating_add(1000),
        )?;
        let events = &self.events;
        at_least(
            "events.heartbeat_interval_ms",
            events.heartbeat_interval_ms,
            10,
        )?;
        at_least("events.poll_interval_ms", events.poll_interval_ms, 10)?;
        at_least("events.replay_batch", u64::from(events.replay_batch), 1)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hiregate_store::settings::DatabaseKind;

    #[test]
    fn the_mcp_wallet_and_its_limits_are_validated() {
        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let ok = Settings::from_defaults_and(&format!(
            "[mcp]\nwallet_private_key = \"{key}\"\nmax_per_hire = 5\nmax_per_day = 10\n"
        ))
        .unwrap();
        assert_eq!((ok.mcp.max_per_hire, ok.mcp.max_per_day), (5, 10));
        assert!(
            !format!("{ok:?}").contains(&key[2..]),
            "the wallet key is never shown"
        );
        assert!(
            Settings::from_defaults_and("")
                .unwrap()
                .mcp
                .wallet_private_key
                .is_none()
        );
        for (toml, field) in [
            (
                "wallet_private_key = \"0xnot-a-key\"\nmax_per_hire = 5\nmax_per_day = 10",
                "mcp.wallet_private_key",
            ),
            (
                &format!("wallet_private_key = \"{key}\"\nmax_per_hire = 0\nmax_per_day = 10"),
                "mcp.max_per_hire",
            ),
            ("max_sessions = 0", "mcp.max_sessions"),
            (
                &format!("wallet_private_key = \"{key}\"\nmax_per_hire = 5\nmax_per_day = 4"),
                "mcp.max_per_day",
            ),
        ] {
            let error = Settings::from_defaults_and(&format!("[mcp]\n{toml}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(field), "{field}: {error}");
            assert!(!error.contains("not-a-key"), "{error}");
        }
    }

    /// Setting only the wallet gives a working MCP `hire`: the limits have usable defaults
    /// (5 and 50 whole units of a 6-decimals token), not 0, which would refuse every hire.
    #[test]
    fn a_wallet_alone_gets_usable_spending_limits() {
        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let settings =
            Settings::from_defaults_and(&format!("[mcp]\nwallet_private_key = \"{key}\"\n"))
                .expect("a wallet alone is a valid [mcp] section");
        assert_eq!(
            (settings.mcp.max_per_hire, settings.mcp.max_per_day),
            (5_000_000, 50_000_000)
        );
    }

    #[test]
    fn defaults_are_valid() {
        let settings = Settings::from_defaults_and("").unwrap();
        assert_eq!(settings.database.url.kind(), DatabaseKind::Sqlite);
        assert_eq!(settings.database.url.expose(), "sqlite://hiregate.db");
        assert!(!settings.outbound.allow_private_targets);
        assert!(settings.outbound.require_https);
        assert_eq!(settings.facilitator.mode, FacilitatorMode::Embedded);
        assert!(settings.admin.api_key.is_none());
    }

    fn invalid_key(overrides: &str) -> String {
        match Settings::from_defaults_and(overrides) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    /// The key of a value that does not parse into its type (a [`ConfigError::Load`], as a
    /// wrong type is) and the reason given for it.
    fn unparsed_key(overrides: &str) -> (String, String) {
        match Settings::from_defaults_and(overrides) {
            Err(ConfigError::Load(error)) => {
                let errors: Vec<figment::Error> = (*error).into_iter().collect();
                assert_eq!(errors.len(), 1, "{errors:?}");
                (errors[0].path.join("."), errors[0].kind.to_string())
            }
            other => panic!("expected a Load error, got {other:?}"),
        }
    }

    #[test]
    fn rule_violations_name_the_key() {
        assert_eq!(
            invalid_key("[database]\nmin_connections = 50"),
            "database.min_connections"
        );
        assert_eq!(
            invalid_key("[facilitator]\nmode = \"http\""),
            "facilitator.url"
        );
        assert_eq!(invalid_key("[admin]\napi_key = \"short\""), "admin.api_key");
        assert_eq!(
            invalid_key("[health]\nmiss_threshold = 0"),
            "health.miss_threshold"
        );
        // Values that do not parse into their types are refused as they are read, by key.
        assert_eq!(
            unparsed_key(
                "[chains.devnet]\nnetwork = \"base\"\nrpc_url = \"http://127.0.0.1:8545\""
            ),
            (
                "chains.devnet.network".to_owned(),
                "`base` is not a CAIP-2 eip155:<chain id>".to_owned()
            )
        );
        assert_eq!(
            invalid_key(
                "[chains.devnet]\nnetwork = \"eip155:31337\"\nrpc_url = \"http://127.0.0.1:8545\""
            ),
            "chains.devnet.relayer_private_key"
        );
        assert_eq!(
            invalid_key("[contracts]\ndefault_acceptance_window_s = 99999"),
            "contracts.default_acceptance_window_s"
        );
        assert_eq!(
            invalid_key("[escrow]\ncapture_margin_s = 120"),
            "escrow.capture_margin_s"
        );
        assert_eq!(
            invalid_key("[http]\ncors_allowed_origins = [\"*\", \"https://a.example\"]"),
            "http.cors_allowed_origins"
        );
        let chain = "[chains.devnet]\nnetwork = \"eip155:31337\"\nrpc_url = \"http://127.0.0.1:8545\"\n\
            relayer_private_key = \"0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d\"\n";
        let (key, reason) = unparsed_key(&format!("{chain}operator_private_key = \"0x12\""));
        assert_eq!(key, "chains.devnet.operator_private_key");
        assert!(
            reason.starts_with("must be 32 bytes of hex (64 hex digits, optional 0x)"),
            "{reason}"
        );
        let token = |address: &str| {
            format!(
                "{chain}[[chains.devnet.tokens]]\naddress = \"{address}\"\nname = \"T\"\n\
                 version = \"1\"\ndecimals = 6\nsymbol = \"T\"\n"
            )
        };
        for bad in ["5FbDB2315678afecb367f032d93F642f64180aa3", "0x1234", "0xZZ"] {
            let (key, reason) = unparsed_key(&token(bad));
            assert!(key.starts_with("chains.devnet.tokens"), "{key}");
            assert_eq!(reason, "must be a 0x-prefixed 20-byte hex address");
        }
        assert_eq!(
            invalid_key(&format!(
                "{chain}operator_private_key = \"0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a\""
            )),
            "escrow.treasury"
        );
        assert_eq!(
            invalid_key(&format!(
                "{chain}auth_capture_escrow = \"0x0000000000000000000000000000000000000000\""
            )),
            "chains.devnet.auth_capture_escrow"
        );
        assert_eq!(
            invalid_key("[escrow]\ndefault_fee_bps = 600\nmax_fee_bps = 500"),
            "escrow.default_fee_bps"
        );
        assert_eq!(
            invalid_key("[escrow]\nmax_pending_s = 86401"),
            "escrow.max_pending_s"
        );
    }

    #[test]
    fn escrow_addresses_default_to_the_canonical_deployment() {
        let settings = Settings::from_defaults_and(
            r#"
            [chains.devnet]
            network = "eip155:31337"
            rpc_url = "http://127.0.0.1:8545"
            relayer_private_key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
            operator_private_key = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"
            [escrow]
            treasury = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
            "#,
        )
        .unwrap();
        let chain = &settings.chains["devnet"];
        assert_eq!(chain.auth_capture_escrow, CANONICAL_AUTH_CAPTURE_ESCROW);
        assert_eq!(
            chain.erc3009_token_collector,
            CANONICAL_ERC3009_TOKEN_COLLECTOR
        );
        assert_eq!(
            chain.operator_refund_collector,
            CANONICAL_OPERATOR_REFUND_COLLECTOR
        );
        // anvil's account #2.
        assert_eq!(
            chain.operator_address().unwrap().to_string(),
            "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
        );
        assert!(!format!("{settings:?}").contains("5de4111afa1a4b94"));
    }

    #[test]
    fn a_token_may_be_paid_over_permit2_and_then_needs_no_domain_version() {
        let chain = "[chains.devnet]\nnetwork = \"eip155:31337\"\nrpc_url = \"http://127.0.0.1:8545\"\n\
            relayer_private_key = \"0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d\"\n";
        let token = |rest: &str| {
            format!(
                "{chain}[[chains.devnet.tokens]]\naddress = \"0x5FbDB2315678afecb367f032d93F642f64180aa3\"\n\
                 name = \"Plain\"\ndecimals = 18\nsymbol = \"PLN\"\n{rest}"
            )
        };
        let settings =
            Settings::from_defaults_and(&token("transfer_method = \"permit2\"")).unwrap();
        let listed = &settings.chains["devnet"].tokens[0];
        assert_eq!(listed.transfer_method, TransferMethod::Permit2);
        assert!(listed.version.is_empty());
        // EIP-3009 (the default) signs with the token's domain: its version is required.
        assert_eq!(invalid_key(&token("")), "chains.devnet.tokens[0].name");
        let settings =
            Settings::from_defaults_and(&token("version = \"2\"\ntransfer_method = \"eip3009\""))
                .unwrap();
        assert_eq!(
            settings.chains["devnet"].tokens[0].transfer_method,
            TransferMethod::Eip3009
        );
        let err = Settings::from_defaults_and(&token("transfer_method = \"erc7710\"")).unwrap_err();
        assert!(err.to_string().contains("transfer_method"), "{err}");
    }

    #[test]
    fn type_errors_name_the_key() {
        let err = Settings::from_defaults_and("[database]\nurl = \"mysql://x\"").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("database.url"), "{message}");
        let err = Settings::from_defaults_and("[http]\nlisten_address = \"nope\"").unwrap_err();
        assert!(err.to_string().contains("http.listen_address"), "{err}");
        let err = Settings::from_defaults_and("[health]\nbogus = 1").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let settings = Settings::from_defaults_and(
            r#"
            [database]
            url = "postgres://app:hunter2-db@db.example/hg"
            [admin]
            api_key = "admin-secret-admin-secret-admin-secret"
            [facilitator]
            auth_header_value = "Bearer facilitator-secret"
            [chains.devnet]
            network = "eip155:31337"
            rpc_url = "http://127.0.0.1:8545"
            relayer_private_key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
            "#,
        )
        .unwrap();
        let debug = format!("{settings:?}");
        for secret in [
            "hunter2-db",
            "admin-secret",
            "facilitator-secret",
            "59c6995e998f97a5",
        ] {
            assert!(!debug.contains(secret), "{secret} leaked in {debug}");
        }
        assert_eq!(settings.database.url.kind(), DatabaseKind::Postgres);
    }
}
