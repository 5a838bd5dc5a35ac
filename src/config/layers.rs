//! The sources of a [`Config`], laid over each other: its declared defaults,
//! the TOML file, the `RKLLMD_*` variables, the flags.
//!
//! clap reads the variables and flags with the defaults filled in, and each
//! value keeps its source; so the file goes over the defaults first, then
//! the values whose source is a variable, then those from flags — the
//! top level's, then a subcommand's (`rkllmd --port 1 serve --port 2` serves
//! on 2).

use super::Config;
use crate::sampling::SamplingOverrides;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// What a command that reads the configuration (the top level, `serve`,
/// `doctor`) takes on its command line: the file, `--print-config` and
/// every setting.
#[derive(Debug, Clone, Default, Args)]
pub struct ConfigArgs {
    /// TOML config file (its settings are overridden by RKLLMD_* variables and flags).
    #[arg(long, env = "RKLLMD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    pub print_config: bool,
    #[command(flatten)]
    settings: Given,
}

/// Every setting as clap read it (flags, variables, defaults), each value
/// with its source, so that [`Config::assemble`] can put the file between
/// the defaults and the rest.
#[derive(Debug, Clone, Default)]
pub struct Given(ArgMatches);

impl Given {
    /// Only the values that came from `source`.
    fn only_from(&self, source: ValueSource) -> ArgMatches {
        let mut matches = self.0.clone();
        let ids: Vec<String> = matches.ids().map(|id| id.as_str().to_owned()).collect();
        for id in ids {
            if matches.value_source(&id) != Some(source) {
                // Ids come from these matches, so clearing cannot fail.
                let _ = matches.try_clear_id(&id);
            }
        }
        matches
    }
}

impl FromArgMatches for Given {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(Given(matches.clone()))
    }
    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0 = matches.clone();
        Ok(())
    }
}

impl Args for Given {
    fn augment_args(cmd: Command) -> Command {
        Config::augment_args(cmd)
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        Config::augment_args_for_update(cmd)
    }
}

impl Default for Config {
    /// Each setting's declared `default_value`, read by clap with the
    /// variables left out.
    fn default() -> Self {
        let defaults_only = Config::augment_args(Command::new("defaults")).mut_args(|arg| arg.env(None));
        defaults_only
            .try_get_matches_from(["defaults"])
            .and_then(|matches| Config::from_arg_matches(&matches))
            .expect("every declared default parses (config::tests::defaults_are_the_declared_ones)")
    }
}

impl Config {
    /// Defaults, then the file (the last layer's `--config`), then the
    /// variables, then each layer's flags in order.
    pub fn assemble(layers: &[&ConfigArgs]) -> Result<Config, ConfigError> {
        let mut config = match layers.iter().rev().find_map(|l| l.config.as_deref()) {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        for source in [ValueSource::EnvVariable, ValueSource::CommandLine] {
            for layer in layers {
                config
                    .update_from_arg_matches(&layer.settings.only_from(source))
                    .map_err(|e| ConfigError::Invalid(e.to_string()))?;
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// The defaults with the file's settings over them.
    fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: shown.clone(), source })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse { path: shown, message: e.to_string() })
    }
}

/// The `[sampling]` table. Requests may carry fields we ignore, but a
/// config key we do not know is a mistake: name it.
pub(super) fn strict_sampling<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SamplingOverrides, D::Error> {
    use serde::de::Error;
    let table = toml::Table::deserialize(d)?;
    if let Some(key) = table.keys().find(|k| !SamplingOverrides::FIELDS.contains(&k.as_str())) {
        return Err(D::Error::custom(format!(
            "unknown key `{key}` in [sampling]; expected one of {}",
            SamplingOverrides::FIELDS.join(", ")
        )));
    }
    table.try_into().map_err(D::Error::custom)
}
