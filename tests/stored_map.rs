//! A store over the public API only: each key's state as `StoredState` bytes in a map,
//! decided under one lock (`probes_custom_store`'s honest core, `probes_transition_carry`'s
//! store that does not carry).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ratelimit::store::{Request, Stacked, Store, StoredState};
use ratelimit::{Decision, Error};

/// Each key's state as `StoredState` bytes, decided under one lock. A [`Store`] that keeps
/// no blocks, gives nothing back and carries nothing (`Store::carries`).
#[derive(Clone, Default)]
pub struct StoredMap(pub Arc<Mutex<HashMap<String, Vec<u8>>>>);

impl StoredMap {
    /// One call, as [`Store::decide`].
    pub fn decide(&self, request: &Request<'_>) -> Result<Decision, Error> {
        let mut map = self.0.lock().unwrap();
        let key = request.key().as_str();
        let mut state = match map.get(key) {
            Some(bytes) => StoredState::from_bytes(bytes)?,
            None => StoredState::new(request.quota()),
        };
        let decision = state.decide(request)?;
        if request.spends() && decision.allowed {
            map.insert(key.to_owned(), state.to_bytes());
        }
        Ok(decision)
    }

    /// Several limits as one, as [`Store::decide_all`]: every one looked at, then each spent
    /// when all admit.
    pub fn decide_all(&self, stacked: &Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let mut map = self.0.lock().unwrap();
        let mut states = Vec::new();
        for c in stacked.checks() {
            states.push(match map.get(c.key.as_str()) {
                Some(bytes) => StoredState::from_bytes(bytes)?,
                None => StoredState::new(c.quota),
            });
        }
        let mut decisions = Vec::new();
        for (request, state) in stacked.requests().zip(&mut states) {
            decisions.push(state.decide(&request.as_look())?);
        }
        if stacked.spends() && decisions.iter().all(|d| d.allowed) {
            for (i, (request, state)) in stacked.requests().zip(&mut states).enumerate() {
                decisions[i] = state.decide(&request)?;
                map.insert(request.key().as_str().to_owned(), state.to_bytes());
            }
        }
        Ok(decisions)
    }
}

impl Store for StoredMap {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        StoredMap::decide(self, &request)
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        StoredMap::decide_all(self, &stacked)
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Ok(self.0.lock().unwrap().remove(key).is_some())
    }
}
