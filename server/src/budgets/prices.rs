//! The per-model price table behind the `credits` metric (BUD-1): credits per million prompt,
//! completion and (optionally) cached prompt tokens. The configuration file's `[prices]` table is
//! the default; prices set in the web app override it model by model. `*` prices any model not
//! listed; a model with no price and no `*` costs nothing (the Budgets page says so).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{error::Error, records::Usage};

/// Credits per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub prompt: f64,
    pub completion: f64,
    /// Cached prompt tokens; the prompt price when absent.
    #[serde(default)]
    pub cached: Option<f64>,
}

impl Price {
    pub fn validate(&self) -> Result<(), Error> {
        let ok = |v: f64| v.is_finite() && (0.0..=1e9).contains(&v);
        if !ok(self.prompt) {
            return Err(Error::field("prompt", "a price is a number of credits from 0 up"));
        }
        if !ok(self.completion) {
            return Err(Error::field("completion", "a price is a number of credits from 0 up"));
        }
        if self.cached.is_some_and(|c| !ok(c)) {
            return Err(Error::field("cached", "a price is a number of credits from 0 up"));
        }
        Ok(())
    }
}

/// The model used when a model has no price of its own.
pub const ANY_MODEL: &str = "*";

/// The price table in force.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices(pub BTreeMap<String, Price>);

impl Prices {
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.0.get(model).or_else(|| self.0.get(ANY_MODEL))
    }

    /// What a request's usage costs, in micro-credits. Cached tokens are part of the prompt
    /// tokens (as every provider's usage is recorded), charged at the cached price.
    pub fn micro_credits(&self, model: &str, usage: &Usage) -> i64 {
        let Some(p) = self.price(model) else { return 0 };
        let input = usage.input.unwrap_or(0).max(0) as f64;
        let cached = (usage.cached.unwrap_or(0).max(0) as f64).min(input);
        let output = usage.output.unwrap_or(0).max(0) as f64;
        // tokens × credits per million tokens = micro-credits
        let micro =
            (input - cached) * p.prompt + cached * p.cached.unwrap_or(p.prompt) + output * p.completion;
        micro.round() as i64
    }

    /// `over`'s prices win, model by model.
    pub fn overlay(&self, over: &Prices) -> Prices {
        let mut all = self.0.clone();
        all.extend(over.0.iter().map(|(k, v)| (k.clone(), *v)));
        Prices(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_follow_the_models_price_then_the_default() {
        let mut t = BTreeMap::new();
        t.insert("gpt-5".to_owned(), Price { prompt: 1.25, completion: 10.0, cached: Some(0.125) });
        t.insert(ANY_MODEL.to_owned(), Price { prompt: 1.0, completion: 1.0, cached: None });
        let prices = Prices(t);
        let usage = Usage { input: Some(1_000), output: Some(100), cached: Some(400) };
        // 600 × 1.25 + 400 × 0.125 + 100 × 10 = 750 + 50 + 1000 micro-credits
        assert_eq!(prices.micro_credits("gpt-5", &usage), 1_800);
        assert_eq!(prices.micro_credits("other", &usage), 1_100);
        assert_eq!(Prices::default().micro_credits("gpt-5", &usage), 0, "no price, no cost");
    }
}
