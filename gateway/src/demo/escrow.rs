//! Steps 9–11 of the demo: two `auth-capture` listings, one hire captured with the fee and one
//! voided with the payer made whole, balances checked on chain at every step.

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, ensure};
use hiregate_payments::devnet::Devnet;
use hiregate_worker_sdk::seeker::SeekerClient;
use serde_json::json;
use url::Url;

use super::*;

/// The gateway's escrow operator key and treasury.
pub(super) struct EscrowParties {
    pub(super) operator: PrivateKeySigner,
    pub(super) treasury: Address,
}

/// What the escrowed steps of the demo share.
pub(super) struct EscrowDemo<'a> {
    pub(super) http: &'a reqwest::Client,
    pub(super) gateway: &'a Url,
    pub(super) seeker_key: &'a str,
    pub(super) seeker: &'a SeekerClient,
    pub(super) devnet: &'a Devnet,
    pub(super) escrow: &'a EscrowParties,
    /// `getTokenStore(operator)`: where the escrow keeps the operator's locked funds.
    pub(super) store: Address,
}

impl EscrowDemo<'_> {
    /// Lock → verified → (acceptance window) → capture with the fee.
    pub(super) async fn captured(&self, worker_id: &str, payout: Address) -> anyhow::Result<()> {
        step("10. escrowed hire: lock → verified → capture with the fee");
        let mut proposal = proposal(
            worker_id,
            &json!({"text": "the escrow holds the money until the work is verified."}),
        );
        proposal["payment_scheme"] = json!("auth-capture");
        proposal["acceptance_window_s"] = json!(ACCEPTANCE_WINDOW_S);
        let contract = self.seeker.propose(&proposal).await?;
        let challenge = self.seeker.challenge(&contract.id).await?;
        let offer = challenge
            .accepts
            .first()
            .context("the 402 offers no way to pay")?;
        ensure!(
            offer.scheme == "auth-capture",
            "the escrowed contract's 402 offers {}",
            offer.scheme
        );
        say(&format!(
            "PAYMENT-REQUIRED: auth-capture {} to {}, captureAuthorizer {}, feeRecipient {}, fee {}–{} bps, captureDeadline {}",
            offer.amount,
            offer.pay_to,
            plain(&offer.extra["captureAuthorizer"]),
            plain(&offer.extra["feeRecipient"]),
            plain(&offer.extra["minFeeBps"]),
            plain(&offer.extra["maxFeeBps"]),
            plain(&offer.extra["captureDeadline"])
        ));
        let before = self.balances(payout).await?;
        before.print("before");

        let outcome = self.seeker.execute(&contract.id).await?;
        ensure!(
            outcome.status == 200,
            "escrowed execute answered {}: {}",
            outcome.status,
            outcome.body
        );
        say(&format!(
            "deliverable released at once (the money is locked): {}",
            compact(&outcome.body["deliverable"])
        ));
        let state = self.seeker.contract(&contract.id).await?.state;
        ensure!(
            state == "accepted",
            "verified escrowed contract is {state}, not accepted"
        );
        let locked = self.balances(payout).await?;
        locked.print("locked");
        let price = U256::from(PRICE);
        ensure!(
            before.payer - locked.payer == price
                && locked.store - before.store == price
                && locked.worker == before.worker
                && locked.treasury == before.treasury,
            "while locked the escrow should hold the price and nobody else move: {before:?} → {locked:?}"
        );
        say(&format!(
            "{} is accepted; capture when its {ACCEPTANCE_WINDOW_S} s acceptance window ends",
            contract.id
        ));
        self.wait_for(&contract.id, "settled").await?;
        let after = self.balances(payout).await?;
        after.print("captured");
        let fee = price * U256::from(FEE_BPS) / U256::from(10_000u32);
        ensure!(
            before.payer - after.payer == price
                && after.store == before.store
                && after.worker - before.worker == price - fee
                && after.treasury - before.treasury == fee,
            "capture moved the wrong amounts: {before:?} → {after:?} (fee {fee})"
        );
        self.print_trail(
            &contract.id,
            &[
                "authorization_sent",
                "payment_authorized",
                "verification_passed",
                "acceptance_window_closed",
                "settlement_succeeded",
            ],
        )
        .await?;
        say(&format!(
            "{} is settled: the worker got {} and the treasury the fee {}",
            contract.id,
            units(price - fee),
            units(fee)
        ));
        Ok(())
    }

    /// Lock → rejected → void: the payer is made whole.
    pub(super) async fn voided(&self, worker_id: &str, payout: Address) -> anyhow::Result<()> {
        step("11. escrowed rejection: lock → rejected → void");
        let mut proposal = proposal(worker_id, &json!({"text": "anything", "mode": "invalid"}));
        proposal["payment_scheme"] = json!("auth-capture");
        let contract = self.seeker.propose(&proposal).await?;
        let before = self.balances(payout).await?;
        before.print("before");
        let outcome = self.seeker.execute(&contract.id).await?;
        ensure!(
            outcome.status == 422,
            "schema-invalid escrowed delivery answered {}, not 422: {}",
            outcome.status,
            outcome.body
        );
        say(&format!(
            "422 verification failed: {}",
            compact(&outcome.body["error"]["details"]["verification"]["reason_codes"])
        ));
        self.wait_for(&contract.id, "voided").await?;
        let after = self.balances(payout).await?;
        after.print("voided");
        ensure!(
            after == before,
            "the payer was not made whole: {before:?} → {after:?}"
        );
        self.print_trail(
            &contract.id,
            &[
                "authorization_sent",
                "payment_authorized",
                "verification_failed",
                "payment_voided",
            ],
        )
        .await?;
        say(&format!(
            "{} is voided: the escrow returned every atomic unit to the payer",
            contract.id
        ));
        Ok(())
    }

    async fn balances(&self, worker: Address) -> anyhow::Result<EscrowBalances> {
        Ok(EscrowBalances {
            payer: self
                .devnet
                .balance_of(self.seeker.payer().expect("the demo seeker has a wallet"))
                .await?,
            store: self.devnet.balance_of(self.store).await?,
            worker: self.devnet.balance_of(worker).await?,
            treasury: self.devnet.balance_of(self.escrow.treasury).await?,
        })
    }

    /// Polls the contract until it is `wanted`; a state that never comes fails the demo.
    async fn wait_for(&self, contract_id: &str, wanted: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = self.seeker.contract(contract_id).await?.state;
            if state == wanted {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{contract_id} stayed {state}, never {wanted}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Prints the contract's event log entries of `kinds` in order, with their transactions;
    /// a missing one fails the demo.
    async fn print_trail(&self, contract_id: &str, kinds: &[&str]) -> anyhow::Result<()> {
        let response = self
            .http
            .get(
                self.gateway
                    .join(&format!("v1/contracts/{contract_id}/events.jsonl"))?,
            )
            .bearer_auth(self.seeker_key)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        ensure!(status.is_success(), "event log answered {status}: {text}");
        let events: Vec<Value> = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .context("event log line is not JSON")?;
        let mut trail = Vec::new();
        for kind in kinds {
            let event = events
                .iter()
                .find(|event| event["kind"] == *kind)
                .with_context(|| format!("{contract_id} has no {kind} event"))?;
            trail.push(match event["details"]["transaction"].as_str() {
                Some(tx) => format!("{kind} (tx {tx})"),
                None => (*kind).to_owned(),
            });
        }
        say(&format!("events: {}", trail.join(" → ")));
        Ok(())
    }
}

/// Token balances around an escrowed payment.
#[derive(Debug, PartialEq, Eq)]
struct EscrowBalances {
    payer: U256,
    store: U256,
    worker: U256,
    treasury: U256,
}

impl EscrowBalances {
    fn print(&self, when: &str) {
        say(&format!(
            "{when:>8}: payer {}  escrow {}  worker {}  treasury {}",
            units(self.payer),
            units(self.store),
            units(self.worker),
            units(self.treasury)
        ));
    }
}

/// `getTokenStore(operator)` of the devnet escrow.
pub(super) async fn token_store(devnet: &Devnet, operator: Address) -> anyhow::Result<Address> {
    use alloy::providers::Provider as _;
    use alloy::rpc::types::{TransactionInput, TransactionRequest};
    use alloy::sol_types::SolCall as _;
    use hiregate_payments::auth_capture::abi::IAuthCaptureEscrow;
    let call = IAuthCaptureEscrow::getTokenStoreCall { operator };
    let request = TransactionRequest::default()
        .to(devnet.auth_capture_escrow())
        .input(TransactionInput::new(call.abi_encode().into()));
    let bytes = devnet
        .provider()
        .call(request)
        .await
        .context("asking the escrow for the operator's token store")?;
    Ok(IAuthCaptureEscrow::getTokenStoreCall::abi_decode_returns(
        &bytes,
    )?)
}
