use super::*;
use clap::Parser;
use rkllm_sys::SamplingParams;

/// A command line with one layer of config arguments, as the top level has.
#[derive(Parser)]
struct Line {
    #[command(flatten)]
    args: ConfigArgs,
    #[command(subcommand)]
    sub: Option<Sub>,
}

#[derive(clap::Subcommand)]
enum Sub {
    Serve(ConfigArgs),
}

/// Parses `argv` (no variables: tests run in parallel and share the environment).
fn assemble(argv: &[&str]) -> Result<Config, ConfigError> {
    let line = Line::try_parse_from(std::iter::once("rkllmd").chain(argv.iter().copied())).unwrap();
    let mut layers = vec![&line.args];
    if let Some(Sub::Serve(args)) = &line.sub {
        layers.push(args);
    }
    Config::assemble(&layers)
}

fn write(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f
}

#[test]
fn defaults_are_the_declared_ones() {
    let c = Config::default();
    assert_eq!(c.host, IpAddr::from([127, 0, 0, 1]));
    assert_eq!((c.port, c.queue_depth, c.body_limit_bytes), (8080, 16, 8 * 1024 * 1024));
    assert_eq!((c.backend, c.log_format, c.reasoning), (Backend::Auto, LogFormat::Text, ReasoningMode::Split));
    assert_eq!((&c.model, c.template, &c.cors_origins), (&None, None, &vec![]));
    assert_eq!(c.telemetry_root, PathBuf::from("/"));
    assert_eq!(assemble(&[]).unwrap(), c, "no file and no flags: the defaults");
}

#[test]
fn file_then_flags_in_that_order() {
    let f = write("port = 9000\nqueue_depth = 3\nmodel_id = \"m\"\n[sampling]\ntop_k = 20\n");
    let path = f.path().to_str().unwrap();
    let c = assemble(&["--config", path, "--port", "9100", "--cors-origins", "a,b"]).unwrap();
    assert_eq!(c.port, 9100, "flag beats file");
    assert_eq!(c.queue_depth, 3, "file beats default");
    assert_eq!(c.model_id.as_deref(), Some("m"));
    assert_eq!(c.cors_origins, ["a", "b"]);
    assert_eq!(c.sampling.apply(SamplingParams::RKLLM_DEFAULTS).top_k, 20);
    assert_eq!(c.sampling.apply(SamplingParams::RKLLM_DEFAULTS).top_p, SamplingParams::RKLLM_DEFAULTS.top_p);
    assert_eq!(c.host, IpAddr::from([127, 0, 0, 1]));
}

#[test]
fn a_subcommands_flags_come_last() {
    let f = write("port = 9000\n");
    let path = f.path().to_str().unwrap();
    let c = assemble(&["--port", "1", "--queue-depth", "2", "serve", "--port", "3", "--config", path]).unwrap();
    assert_eq!((c.port, c.queue_depth), (3, 2));
    let c = assemble(&["--config", path, "serve", "--max-new-tokens", "7"]).unwrap();
    assert_eq!((c.port, c.max_new_tokens), (9000, 7), "the top level's file, the subcommand's flag");
}

#[test]
fn conversation_names_are_the_same_in_flags_and_file() {
    for mode in ReasoningMode::ALL {
        let f = write(&format!("reasoning = \"{}\"\n", mode.name()));
        let from_file = assemble(&["--config", f.path().to_str().unwrap()]).unwrap();
        let from_flag = assemble(&["--reasoning", mode.name()]).unwrap();
        assert_eq!((from_file.reasoning, from_flag.reasoning), (mode, mode));
    }
    for family in TemplateFamily::ALL {
        let f = write(&format!("template = \"{}\"\n", family.name()));
        let from_file = assemble(&["--config", f.path().to_str().unwrap()]).unwrap();
        let from_flag = assemble(&["--template", family.name()]).unwrap();
        assert_eq!((from_file.template, from_flag.template), (Some(family), Some(family)));
    }
    assert!(Line::try_parse_from(["rkllmd", "--template", "chatgpt"]).is_err());
}

#[test]
fn unknown_keys_are_named() {
    let f = write("prot = 9000\n");
    let err = assemble(&["--config", f.path().to_str().unwrap()]).unwrap_err().to_string();
    assert!(err.contains("prot"), "{err}");
    let f = write("[sampling]\ntopk = 1\n");
    let err = assemble(&["--config", f.path().to_str().unwrap()]).unwrap_err().to_string();
    assert!(err.contains("topk") && err.contains("top_k"), "{err}");
}

#[test]
fn bad_values_are_refused() {
    for (text, needle) in [
        ("runtime_abi = \"1.1\"\n", "1.1"),
        ("max_new_tokens = 0\n", "max_new_tokens"),
        ("max_new_tokens = 9000\nmax_context_len = 4096\n", "exceeds"),
        ("api_key = \"\"\n", "api_key"),
        ("ollama_listen = \"127.0.0.1:11434\"\nollama_api_key = \"\"\n", "ollama_api_key is empty"),
        ("ollama_api_key = \"k\"\n", "ollama_listen, which is not set"),
        ("ollama_listen = \"localhost:11434\"\n", "give e.g. 127.0.0.1"),
        ("[sampling]\ntop_p = 1.5\n", "top_p"),
        ("[sampling]\nmirostat = 3\n", "mirostat"),
    ] {
        let f = write(text);
        let err = assemble(&["--config", f.path().to_str().unwrap()]).unwrap_err().to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn print_config_shows_sampling_floats_as_written() {
    let file = write("[sampling]\ntemperature = 0.7\ntop_p = 0.9\n");
    let c = assemble(&["--config", file.path().to_str().unwrap()]).unwrap();
    let shown = c.to_toml();
    assert!(shown.contains("temperature = 0.7\n") && shown.contains("top_p = 0.9\n"), "{shown}");
    // What is printed reads back as the same configuration.
    let again = write(&shown);
    assert_eq!(assemble(&["--config", again.path().to_str().unwrap()]).unwrap().sampling, c.sampling);
}

#[test]
fn a_host_name_is_refused_with_the_addresses_to_give() {
    let line = Line::try_parse_from(["rkllmd", "--host", "localhost"]).err().unwrap().to_string();
    assert!(line.contains("`localhost` is not an IP address; give 127.0.0.1"), "{line}");
    let file = write("host = \"localhost\"\n");
    let err = assemble(&["--config", file.path().to_str().unwrap()]).unwrap_err().to_string();
    assert!(err.contains("`localhost` is not an IP address; give 127.0.0.1"), "{err}");
    let line = Line::try_parse_from(["rkllmd", "--metrics-addr", "localhost:9090"]).err().unwrap().to_string();
    assert!(line.contains("give e.g. 127.0.0.1:9090"), "{line}");
    let file = write("metrics_addr = \"localhost:9090\"\n");
    let err = assemble(&["--config", file.path().to_str().unwrap()]).unwrap_err().to_string();
    assert!(err.contains("give e.g. 127.0.0.1:9090"), "{err}");
    let file = write("metrics_addr = \"127.0.0.1:9090\"\n");
    let c = assemble(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert_eq!(c.metrics_addr, Some(SocketAddr::from(([127, 0, 0, 1], 9090))));
}

#[test]
fn the_ollama_address_and_its_key_are_read_and_the_key_is_masked() {
    let file =
        write("api_key = \"main-secret\"\nollama_listen = \"127.0.0.1:11434\"\nollama_api_key = \"ollama-secret\"\n");
    let c = assemble(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert_eq!(c.ollama_listen, Some(SocketAddr::from(([127, 0, 0, 1], 11434))));
    assert_eq!(c.ollama_api_key.as_deref(), Some("ollama-secret"));
    let shown = c.to_toml();
    assert!(shown.contains("ollama_api_key = \"<set>\"") && !shown.contains("secret"), "{shown}");
    assert_eq!(Config::default().ollama_listen, None, "off by default");
}
