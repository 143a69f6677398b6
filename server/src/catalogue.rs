//! The models each provider's accounts serve, as an operator configured them
//! (`SUBLANE_<PROVIDER>_MODELS`). A configured list closes the provider: its accounts serve
//! exactly those models (RT-8), a model no account of the pool lists is 404 `model_not_found`
//! before any upstream call (ID-4), and `/v1/models` shows the list (PX-4). Without one,
//! Antigravity accounts serve the models their provider lists (read with their quota), and the
//! other providers take any model, the upstream's answer deciding (RT-3).

use std::collections::HashSet;

use app::model::Provider;

use crate::quota::observation::base_model;

/// Configured model lists, by provider.
#[derive(Debug, Clone, Default)]
pub struct Catalogues {
    by_provider: [Option<HashSet<String>>; Provider::ALL.len()],
}

impl Catalogues {
    /// From `(provider, models)` pairs; an empty list configures nothing.
    pub fn new(lists: impl IntoIterator<Item = (Provider, Vec<String>)>) -> Self {
        let mut c = Catalogues::default();
        for (provider, models) in lists {
            let set: HashSet<String> =
                models.into_iter().map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()).collect();
            if !set.is_empty() {
                c.by_provider[provider as usize] = Some(set);
            }
        }
        c
    }

    /// The provider's configured models, if an operator listed them.
    pub fn configured(&self, provider: Provider) -> Option<&HashSet<String>> {
        self.by_provider[provider as usize].as_ref()
    }

    /// Whether the provider's accounts serve `model` by configuration: `None` when the provider
    /// has no list (its accounts' own lists, or the upstream, decide).
    pub fn lists(&self, provider: Provider, model: &str) -> Option<bool> {
        self.configured(provider).map(|c| c.contains(model) || c.contains(base_model(model)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_list_closes_its_provider_only() {
        let c = Catalogues::new([
            (Provider::Codex, vec!["gpt-5.1-codex".into(), " gpt-5.1 ".into()]),
            (Provider::Claude, vec![]),
        ]);
        assert_eq!(c.lists(Provider::Codex, "gpt-5.1"), Some(true));
        assert_eq!(c.lists(Provider::Codex, "gpt-9"), Some(false));
        assert_eq!(c.lists(Provider::Claude, "anything"), None, "an empty list configures nothing");
        assert_eq!(c.lists(Provider::OpenaiApi, "gpt-9"), None);
    }
}
