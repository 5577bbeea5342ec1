"""Chat templates (Jinja) for the tiny and toy-world checkpoints this project builds itself.

Both follow the public Qwen formats: `<|im_start|>role\n…<|im_end|>`, an image as
`<|vision_start|><|image_pad|><|vision_end|>`. The hybrid-thinking one follows Qwen3: with
`enable_thinking` true (the default) the assistant turn opens `<think>\n`; with it false an empty
think block `<think>\n\n</think>\n\n` is prefilled. Real checkpoints bring their own templates.
"""

_MESSAGES = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
)

QWEN_INSTRUCT_TEMPLATE = _MESSAGES + (
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

QWEN_HYBRID_THINKING_TEMPLATE = _MESSAGES + (
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}{{- '<think>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)
