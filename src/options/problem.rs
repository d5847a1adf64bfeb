//! What can be wrong with the command line or the config file. Its own file so
//! that flags, the config file and the settings table can all name it without
//! importing each other.

use std::path::PathBuf;

/// One problem with the command line or config file, as one line naming the
/// flag or field (and file), the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Problem {
    #[error("invalid value {value:?} for --{flag}: {reason}")]
    Flag {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("{}: field {field}: invalid value {value:?}: {reason}", file.display())]
    Field {
        file: PathBuf,
        field: String,
        value: String,
        reason: String,
    },
    /// The config file as a whole: unreadable, bad YAML, wrong kind.
    #[error("{}: {reason}", file.display())]
    File { file: PathBuf, reason: String },
    /// The command line does not parse (unknown flag, missing value).
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Other(String),
}

/// Why `load` returned no `Options`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// `--help` or `--version` was asked for: print it, exit 0.
    #[error("{0}")]
    Help(clap::Error),
    /// Everything found wrong, one line per problem.
    #[error("{}", lines(.0))]
    Invalid(Vec<Problem>),
}

fn lines(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The problems (empty for `Help`).
    #[cfg(test)]
    pub(crate) fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Help(_) => &[],
            ConfigError::Invalid(p) => p,
        }
    }

    /// Turns clap's multi-line errors into one line, pflag-style where it helps.
    pub(crate) fn from_clap(e: clap::Error) -> ConfigError {
        use clap::error::{ContextKind, ErrorKind};
        let msg = match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => return ConfigError::Help(e),
            ErrorKind::UnknownArgument => {
                let arg = e
                    .get(ContextKind::InvalidArg)
                    .map(std::string::ToString::to_string)
                    .unwrap_or_default();
                if arg.starts_with('-') {
                    let hint = e
                        .get(ContextKind::SuggestedArg)
                        .map(|s| format!(" (did you mean {s}?)"))
                        .unwrap_or_default();
                    let flag = arg.split('=').next().unwrap_or(&arg);
                    format!("unknown flag: {flag}{hint}")
                } else {
                    format!("unexpected argument {arg:?}: oxlet takes no positional arguments")
                }
            }
            _ => {
                let rendered = e.render().to_string();
                let first = rendered.lines().next().unwrap_or("invalid command line");
                first.trim_start_matches("error: ").to_string()
            }
        };
        ConfigError::Invalid(vec![Problem::Usage(msg)])
    }
}
