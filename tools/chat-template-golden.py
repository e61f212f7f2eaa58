#!/usr/bin/env python3
"""Writes runtime/chat/testdata/tools.json: tool-use and thinking renderings of
the Llama-3 and Qwen3 chat templates in ../shared/tokenizers, computed with
Python jinja2 (3.1.6) the way HF transformers' apply_chat_template renders
them (immutable sandbox, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, tojson without ASCII escaping). The plain conversations are
in ../shared/golden/chat-templates.json; these add what its cases leave out.

    python3 tools/chat-template-golden.py [SHARED_DIR]
"""
import json
import os
import sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
def raise_exception(m): raise Exception(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters['tojson']=tojson
env.globals['raise_exception']=raise_exception
tools=[{"type":"function","function":{"name":"get_weather","description":"Get the weather, in °C","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]
cases=[
 ("tools", [{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"}], True, {"tools":tools}),
 ("tool-call", [{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","content":"21°C"}], True, {"tools":tools}),
 ("no-thinking", [{"role":"user","content":"Hi"}], True, {"enable_thinking":False}),
 ("reasoning", [{"role":"user","content":"2+2?"},{"role":"assistant","content":"<think>\nadd\n</think>\n\n4"},{"role":"user","content":"3+3?"}], True, {}),
 ("no-user", [{"role":"system","content":"Only a system prompt."}], True, {}),
 ("unicode", [{"role":"user","content":"héllo «ok» 日本 \"q\" \\n"}], True, {}),
]
shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared")
out={}
for tok in ["llama3","qwen3"]:
    tc=json.load(open(os.path.join(shared, "tokenizers", tok, "tokenizer_config.json")))
    t=env.from_string(tc["chat_template"])
    res=[]
    for name,msgs,agp,extra in cases:
        try:
            r=t.render(messages=msgs, add_generation_prompt=agp, bos_token=tc.get("bos_token") or "", eos_token=tc.get("eos_token") or "", **extra)
        except Exception as e:
            r="ERROR: "+str(e)
        res.append({"name":name,"messages":msgs,"add_generation_prompt":agp,"extra":extra,"rendered":r})
    out[tok]=res
json.dump({"note": "written by tools/chat-template-golden.py", "templates":out}, open(os.path.join(os.path.dirname(__file__), "..", "runtime", "chat", "testdata", "tools.json"), "w"), ensure_ascii=False, indent=1)
