//! The chat template renders as transformers' `apply_chat_template(tokenize=False)` does.
//!
//! The reference is tests/fixtures/chat/templates.json: published chat templates (Qwen2, Qwen3,
//! Mixtral, DeepSeek-R1), two probes of transformers' tojson and whitespace settings, and
//! transformers 4.57.1's renderings of a set of conversations, or the message of the
//! `TemplateError` the template raised (scripts/hf_fixtures/make_chat_references.py).

use std::path::Path;

use burn_ascend_openai::chat::{ChatError, ChatMessage, ChatTemplate, FUEL};
use serde_json::{json, Value};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/chat/templates.json"
);

fn fixture() -> Value {
    serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap()
}

fn template(fixture: &Value, name: &str) -> ChatTemplate {
    let t = &fixture["templates"][name];
    let special = ["bos_token", "eos_token"]
        .into_iter()
        .filter_map(|k| t[k].as_str().map(|v| (k, v.to_string())));
    ChatTemplate::from_source(t["chat_template"].as_str().unwrap(), special, FIXTURE).unwrap()
}

#[test]
fn renders_as_transformers() {
    let fixture = fixture();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 50, "the fixture lost its cases");
    let (mut outputs, mut rejections) = (0, 0);
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let what = format!("{name}/{}", case["conversation"].as_str().unwrap());
        let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let result = template(&fixture, name).render_with(
            &messages,
            case["add_generation_prompt"].as_bool().unwrap(),
            case["kwargs"].as_object().unwrap(),
        );
        match (case.get("output"), result) {
            (Some(expected), Ok(text)) => {
                assert_eq!(text, expected.as_str().unwrap(), "{what}");
                outputs += 1;
            }
            (None, Err(ChatError::Rejected(message))) => {
                assert_eq!(message, case["error"].as_str().unwrap(), "{what}");
                rejections += 1;
            }
            (expected, got) => panic!(
                "{what}: expected {expected:?} / {:?}, got {got:?}",
                case.get("error")
            ),
        }
    }
    assert!(
        outputs >= 50 && rejections == 2,
        "{outputs} outputs, {rejections} rejections"
    );
}

#[test]
fn render_without_kwargs_is_render_with_none() {
    let fixture = fixture();
    let qwen3 = template(&fixture, "qwen3");
    let messages = [ChatMessage::new("user", "What is the capital of France?")];
    let case = fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["template"] == "qwen3" && c["conversation"] == "user_only")
        .unwrap();
    assert_eq!(
        qwen3.render(&messages, true).unwrap(),
        case["output"].as_str().unwrap()
    );
}

#[test]
fn bad_roles_are_the_templates_own_message() {
    let fixture = fixture();
    let mixtral = template(&fixture, "mixtral");
    let err = mixtral
        .render(
            &[ChatMessage::new("user", "a"), ChatMessage::new("user", "b")],
            true,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the chat template rejected the conversation: After the optional system message, \
         conversation roles must alternate user/assistant/user/assistant/..."
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn from_dir_reads_tokenizer_config() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "tokenizer_config.json",
        &json!({
            "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}",
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
            "eos_token": "</s>",
        })
        .to_string(),
    );
    let t = ChatTemplate::from_dir(dir.path()).unwrap().unwrap();
    assert_eq!((t.bos_token(), t.eos_token()), (Some("<s>"), Some("</s>")));
    assert_eq!(
        t.render(&[ChatMessage::new("user", "hi")], false).unwrap(),
        "<s>[user]hi</s>"
    );
}

#[test]
fn from_dir_takes_the_default_of_a_template_list_and_legacy_special_tokens() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "tokenizer_config.json",
        &json!({"chat_template": [
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "{{ bos_token }}default"},
        ]})
        .to_string(),
    );
    write(
        dir.path(),
        "special_tokens_map.json",
        r#"{"bos_token": "<B>"}"#,
    );
    let t = ChatTemplate::from_dir(dir.path()).unwrap().unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "<B>default");
}

#[test]
fn chat_template_jinja_takes_priority() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"chat_template": "from config", "eos_token": "<E>"}"#,
    );
    // transformers drops a single trailing newline of the template, as Jinja2 does.
    write(
        dir.path(),
        "chat_template.jinja",
        "from file{{ eos_token }}\n",
    );
    let t = ChatTemplate::from_dir(dir.path()).unwrap().unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "from file<E>");
}

#[test]
fn missing_template_is_none_and_load_names_the_directory() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/mixtral");
    assert!(ChatTemplate::from_dir(&fixtures).unwrap().is_none());
    let empty = tempfile::tempdir().unwrap();
    assert!(ChatTemplate::from_dir(empty.path()).unwrap().is_none());
    let err = ChatTemplate::load(&fixtures).unwrap_err();
    assert!(matches!(err, ChatError::Missing { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains(&fixtures.display().to_string()) && msg.contains("chat_template"),
        "{msg}"
    );
}

#[test]
fn malformed_configs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"chat_template": [{"name": "rag", "template": "x"}, {"name": "tool_use", "template": "y"}]}"#,
    );
    let msg = ChatTemplate::from_dir(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("none named \"default\"") && msg.contains("[\"rag\", \"tool_use\"]"),
        "{msg}"
    );

    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"chat_template": 3}"#,
    );
    let msg = ChatTemplate::from_dir(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("must be a string or a list"), "{msg}");

    write(dir.path(), "tokenizer_config.json", "{not json");
    let err = ChatTemplate::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, ChatError::Json { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
}

#[test]
fn syntax_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "chat_template.jinja",
        "ok\n{% for m in messages %}no end",
    );
    let err = ChatTemplate::from_dir(dir.path()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ChatError::Syntax { .. }), "{msg}");
    assert!(
        msg.contains("chat_template.jinja") && msg.contains("line 2"),
        "{msg}"
    );

    // transformers' training-mask tag is not supported: refused at load, naming it.
    write(
        dir.path(),
        "chat_template.jinja",
        "{% generation %}x{% endgeneration %}",
    );
    let msg = ChatTemplate::from_dir(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("generation"), "{msg}");
}

#[test]
fn rendering_failures_are_not_rejections() {
    let t =
        ChatTemplate::from_source("{{ messages[0].content.nope.deeper }}", [], "inline").unwrap();
    let err = t
        .render(&[ChatMessage::new("user", "x")], false)
        .unwrap_err();
    assert!(matches!(err, ChatError::Render(_)), "{err}");

    let t = ChatTemplate::from_source("{{ messages | tojson(indent=[1]) }}", [], "inline").unwrap();
    let msg = t.render(&[], false).unwrap_err().to_string();
    assert!(
        msg.contains("indent must be an integer or a string"),
        "{msg}"
    );
}

#[test]
fn python_spellings_and_globals() {
    let t = ChatTemplate::from_source(
        "{{ add_generation_prompt }} {{ tools }} {{ documents is none }} {{ x is defined }}\n\
         {%- for m in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}|{{ m.role }}{% endfor %}\
         |{{ strftime_now('%%') }}|{{ {'b': 1, 'a': 2} | tojson(ensure_ascii=true) }}{{ 'é😀' | tojson(ensure_ascii=true) }}",
        [],
        "inline",
    )
    .unwrap();
    let messages = [
        ChatMessage::new("user", "a"),
        ChatMessage::new("assistant", "b"),
    ];
    // Jinja2's own output of this template (True/None spelled as Python does; break from
    // jinja2.ext.loopcontrols; json.dumps(..., ensure_ascii=True)).
    assert_eq!(
        t.render(&messages, true).unwrap(),
        "True None True False|user|%|{\"b\": 1, \"a\": 2}\"\\u00e9\\ud83d\\ude00\""
    );

    let year: i32 = ChatTemplate::from_source("{{ strftime_now('%Y') }}", [], "inline")
        .unwrap()
        .render(&[], false)
        .unwrap()
        .parse()
        .unwrap();
    assert!((2024..10000).contains(&year), "{year}");

    let t = ChatTemplate::from_source("{{ strftime_now('%Q %Y') }}", [], "inline").unwrap();
    let msg = t.render(&[], false).unwrap_err().to_string();
    assert!(
        msg.contains("strftime_now: unsupported format \"%Q %Y\""),
        "{msg}"
    );
}

#[test]
fn a_template_is_shared_between_threads() {
    fn shared<T: Send + Sync>(_: &T) {}
    let fixture = fixture();
    let t = std::sync::Arc::new(template(&fixture, "qwen2"));
    shared(&t);
    let messages = [ChatMessage::new("user", "hi")];
    let expected = t.render(&messages, true).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let t = std::sync::Arc::clone(&t);
            let messages = messages.clone();
            std::thread::spawn(move || t.render(&messages, true).unwrap())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), expected);
    }
}

/// Renders on a thread with the stack of tokio's blocking threads (2 MiB), where the server
/// renders: the result and how long it took.
fn render_on_a_server_thread(
    t: ChatTemplate,
    messages: Vec<ChatMessage>,
) -> (Result<String, ChatError>, std::time::Duration) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let start = std::time::Instant::now();
            (t.render(&messages, true), start.elapsed())
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_template_that_loops_without_end_is_refused_quickly() {
    // 10^10 iterations unbounded; each loop alone is within minijinja's range limit.
    let source = "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}\
                  {% endfor %}";
    let t = ChatTemplate::from_source(source, [], "inline").unwrap();
    let messages = vec![ChatMessage::new("user", "hi")];
    let (result, took) = render_on_a_server_thread(t, messages);
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            ChatError::TooMuchWork {
                messages: 1,
                bytes: 6
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("loop without end") && msg.contains(&FUEL.to_string()),
        "{msg}"
    );
    assert!(took.as_secs_f64() < 5.0, "refused after {took:?}");

    // Data built without end is the same: a string doubled at each turn.
    let t = ChatTemplate::from_source(
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}\
         {% endfor %}{{ ns.s | length }}",
        [],
        "inline",
    )
    .unwrap();
    let (result, _) = render_on_a_server_thread(t, vec![]);
    assert!(
        matches!(result, Err(ChatError::TooMuchWork { .. })),
        "{result:?}"
    );
    // And text written without end: a list holding itself twice, doubled 40 times, printed.
    let t = ChatTemplate::from_source(
        "{% set ns = namespace(x=[]) %}{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}\
         {% endfor %}{{ ns.x }}",
        [],
        "inline",
    )
    .unwrap();
    let (result, took) = render_on_a_server_thread(t, vec![]);
    assert!(
        matches!(result, Err(ChatError::TooMuchWork { .. })),
        "{result:?}"
    );
    assert!(took.as_secs_f64() < 5.0, "refused after {took:?}");
}

#[test]
fn a_template_that_recurses_without_end_is_refused() {
    let source = "{% macro down(n) %}{{ down(n + 1) }}{% endmacro %}{{ down(0) }}";
    let t = ChatTemplate::from_source(source, [], "inline").unwrap();
    let (result, took) = render_on_a_server_thread(t, vec![]);
    let msg = result.unwrap_err().to_string();
    assert!(msg.contains("recursion limit exceeded"), "{msg}");
    assert!(took.as_secs_f64() < 5.0, "refused after {took:?}");

    // A loop that recurses (`loop(...)`) into its own items, each level a list deeper.
    let source = "{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}\
                  {% endfor %}{% for x in [ns.x] recursive %}[{{ loop(x) }}]{% endfor %}";
    let t = ChatTemplate::from_source(source, [], "inline").unwrap();
    let (result, _) = render_on_a_server_thread(t, vec![]);
    let msg = result.unwrap_err().to_string();
    assert!(msg.contains("recursion limit exceeded"), "{msg}");
}

#[test]
fn the_deepest_value_the_budget_builds_is_formatted_serialized_and_dropped() {
    // 40 levels a turn (the parser refuses literals much deeper), 1.6 fuel a level: about the
    // cheapest nesting there is; 1200 turns are 48 000 levels, 5000 run out of fuel. A 2 MiB
    // stack overflows at 2000 levels in a debug build, printing or dropping them.
    let nest = format!("{}ns.x{}", "[".repeat(40), "]".repeat(40));
    for (turns, tail) in [
        (1200, "{{ ns.x }}"),
        (1200, "{{ (ns.x ~ '') | length }}"),
        (1200, "{{ ns.x | tojson }}"),
        (800, "{{ ns.x | tojson(sort_keys=true) }}"),
        (5000, "{{ ns.x | length }}"),
    ] {
        let source = format!(
            "{{% set ns = namespace(x=[]) %}}{{% for i in range({turns}) %}}\
             {{% set ns.x = {nest} %}}{{% endfor %}}{tail}"
        );
        let t = ChatTemplate::from_source(source, [], "inline").unwrap();
        let (result, _) = render_on_a_server_thread(t, vec![]);
        match (turns, result) {
            (5000, Err(ChatError::TooMuchWork { .. })) => {}
            // The text of 48 000 levels, or its length.
            (_, Ok(text)) => assert!(
                text.len() > 48_000 || text.parse::<usize>().is_ok_and(|n| n > 48_000),
                "{tail}: {text}"
            ),
            (_, result) => panic!("{turns} turns, {tail}: {result:?}"),
        }
    }
}

#[test]
fn tojson_cannot_be_made_to_allocate_past_the_budget() {
    for indent in ["1000000000000", "100000000"] {
        let source = format!("{{{{ messages | tojson(indent={indent}) }}}}");
        let t = ChatTemplate::from_source(source, [], "inline").unwrap();
        let messages = vec![ChatMessage::new("user", "hi"); 4];
        let (result, _) = render_on_a_server_thread(t, messages);
        let msg = result.unwrap_err().to_string();
        assert!(
            msg.contains("tojson: the text would be longer than"),
            "indent {indent}: {msg}"
        );
    }
    // Within the budget, the same filter renders as Python's json.dumps.
    let t = ChatTemplate::from_source("{{ [1, [2]] | tojson(indent=2) }}", [], "inline").unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "[\n  1,\n  [\n    2\n  ]\n]");
}

#[test]
fn the_published_templates_render_long_conversations_within_the_budget() {
    let fixture = fixture();
    // 1000 messages, alternating, 500 kB of text: about 128k tokens, the longest prompts.
    let long = "word ".repeat(100);
    let messages: Vec<ChatMessage> = (0..1000)
        .map(|i| ChatMessage::new(["user", "assistant"][i % 2], long.as_str()))
        .collect();
    for name in ["qwen2", "qwen3", "mixtral", "deepseek_r1"] {
        let t = template(&fixture, name);
        let (result, _) = render_on_a_server_thread(t, messages.clone());
        let text = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.len() > 1000 * long.len(), "{name}");
    }
    // Ten times more is past the budget: refused, naming the conversation's size.
    let many: Vec<ChatMessage> = (0..10_000)
        .map(|i| ChatMessage::new(["user", "assistant"][i % 2], long.as_str()))
        .collect();
    let t = template(&fixture, "qwen3");
    let msg = render_on_a_server_thread(t, many)
        .0
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("a conversation of 10000 messages and 5065000 bytes"),
        "{msg}"
    );
}
