#!/usr/bin/env python3
"""Record transformers' renderings of published chat templates into tests/fixtures/chat/templates.json.

Run by hand (CI has no Python; tests/http_chat.rs reads the committed file):

    python scripts/hf_fixtures/make_chat_references.py

The fixture's "templates" are inputs: each published template copied as a string with its bos/eos
tokens and where it was copied from. This script (re)writes its "cases": for every template and
conversation below, `tokenizer.apply_chat_template(messages, tokenize=False, ...)` of a tokenizer
carrying that template and those special tokens, i.e. exactly the string a transformers user gets,
or the message of the TemplateError the template raised.
"""

import json
from pathlib import Path

import jinja2
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "chat" / "templates.json"

SYSTEM = {"role": "system", "content": "You are a concise assistant."}
USER = {"role": "user", "content": "What is the capital of France?"}
ANSWER = {"role": "assistant", "content": "Paris."}
FOLLOW_UP = {"role": "user", "content": "  And of Germany? Grüße, 你好!\n"}
THOUGHT = {"role": "assistant", "content": "<think>\nThe user asks about France.\n</think>\n\nParis."}

# (name, messages, add_generation_prompt, extra template variables)
CONVERSATIONS = [
    ("system_user", [SYSTEM, USER], True, {}),
    ("user_only_no_prompt", [USER], False, {}),
    ("user_only", [USER], True, {}),
    ("multi_turn", [SYSTEM, USER, ANSWER, FOLLOW_UP], True, {}),
    ("multi_turn_no_prompt", [USER, ANSWER, FOLLOW_UP, ANSWER], False, {}),
    ("thought_in_history", [USER, THOUGHT, FOLLOW_UP], True, {}),
    ("enable_thinking_false", [SYSTEM, USER], True, {"enable_thinking": False}),
    ("two_users", [USER, FOLLOW_UP], True, {}),
    ("tool_role", [USER, {"role": "tool", "content": "42"}], True, {}),
]


def render(template: dict, messages, add_generation_prompt: bool, extra: dict) -> dict:
    special = {k: template[k] for k in ("bos_token", "eos_token") if template[k] is not None}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")),
        chat_template=template["chat_template"],
        **special,
    )
    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )
        return {"output": text}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main() -> None:
    fixture = json.loads(FIXTURE.read_text())
    cases = []
    for name, template in fixture["templates"].items():
        for conv, messages, add_generation_prompt, extra in CONVERSATIONS:
            case = {
                "template": name,
                "conversation": conv,
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
                "kwargs": extra,
            }
            case.update(render(template, messages, add_generation_prompt, extra))
            cases.append(case)
    fixture["transformers"] = transformers.__version__
    fixture["jinja2"] = jinja2.__version__
    fixture["cases"] = cases
    FIXTURE.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {FIXTURE}")


if __name__ == "__main__":
    main()
