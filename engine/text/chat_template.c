/* engine/text/chat_template.c — recognise DeepSeek, Kimi and GLM chat templates and render them
 * in C (GLM-5: chat_template_glm.c; DeepSeek-V3.2's encoding: chat_template_dsv32.c).
 *
 * Each renderer below is the Jinja template it replaces, read for plain-text messages under
 * transformers' settings (trim_blocks, lstrip_blocks): the literal strings, the order in which
 * the template walks the messages, and the whitespace its tags leave. The template sources are
 * kept as data to recognise a model's tokenizer_config.json (sources: tests/golden/chat/README.md).
 * Owns no tokenizer state; must not touch the tokenizer files. */
#include "engine/text/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "engine/json/model_json.h"
#include "engine/text/chat_template_internal.h"

static const char numla_tmpl_v2[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ "
    "'User: ' + message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}{{ 'As"
    "sistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ m"
    "essage['content'] + '\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'As"
    "sistant:' }}{% endif %}";

static const char numla_tmpl_v2_5[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system"
    "_prompt='') %}{%- for message in messages %}    {%- if message['role'] == 'system' %}   "
    "     {% set ns.system_prompt = message['content'] %}    {%- endif %}{%- endfor %}{{bos_t"
    "oken}}{{ns.system_prompt}}{%- for message in messages %}    {%- if message['role'] == 'u"
    "ser' %}    {%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}    {%- "
    "endif %}    {%- if message['role'] == 'assistant' and message['content'] is none %}     "
    "   {%- set ns.is_tool = false -%}        {%- for tool in message['tool_calls']%}        "
    "    {%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁"
    "call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\"
    "n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁cal"
    "l▁end｜>'}}            {%- set ns.is_first = true -%}            {%- else %}{{'\\n' +"
    " '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']["
    "'name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<"
    "｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}  "
    "                 {%- endif %}        {%- endfor %}    {%- endif %}    {%- if message['ro"
    "le'] == 'assistant' and message['content'] is not none %}        {%- if ns.is_tool %}{{'"
    "<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}    "
    "    {%- set ns.is_tool = false -%}        {%- else %}{{'<｜Assistant｜>' + message['co"
    "ntent'] + '<｜end▁of▁sentence｜>'}}        {%- endif %}    {%- endif %}    {%- if "
    "message['role'] == 'tool' %}        {%- set ns.is_tool = true -%}        {%- if ns.is_ou"
    "tput_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['"
    "content'] + '<｜tool▁output▁end｜>'}}        {%- set ns.is_output_first = false %}"
    "        {%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool"
    "▁output▁end｜>'}}        {%- endif %}    {%- endif %}{%- endfor -%}{% if ns.is_tool"
    " %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.i"
    "s_tool %}{{'<｜Assistant｜>'}}{% endif %}";

static const char numla_tmpl_v3[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system"
    "_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == "
    "'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message["
    "'content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.sys"
    "tem_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_"
    "token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user"
    "' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%-"
    " if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool ="
    " false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assista"
    "nt｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜too"
    "l▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['"
    "arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%"
    "}{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>"
    "' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments']"
    " + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁o"
    "f▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assis"
    "tant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁e"
    "nd｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false"
    " -%}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>"
    "'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true "
    "-%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begi"
    "n｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first "
    "= false %}{%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜to"
    "ol▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜"
    "tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{"
    "{'<｜Assistant｜>'}}{% endif %}";

static const char numla_tmpl_r1[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system"
    "_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == "
    "'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message["
    "'content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.sys"
    "tem_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{ bos"
    "_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == '"
    "user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %"
    "}{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool "
    "= false -%}{%- for tool in message['tool_calls'] %}{%- if not ns.is_first %}{%- if messa"
    "ge['content'] is none %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call"
    "▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' +"
    " '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁"
    "end｜>'}}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁be"
    "gin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['functi"
    "on']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```'"
    " + '<｜tool▁call▁end｜>'}}{%- endif %}{%- set ns.is_first = true -%}{%- else %}{{'"
    "\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['funct"
    "ion']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```"
    "' + '<｜tool▁call▁end｜>'}}{%- endif %}{%- endfor %}{{'<｜tool▁calls▁end｜><"
    "｜end▁of▁sentence｜>'}}{%- endif %}{%- if message['role'] == 'assistant' and 'tool"
    "_calls' not in message %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message["
    "'content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% "
    "set content = message['content'] %}{% if '</think>' in content %}{% set content = conten"
    "t.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁s"
    "entence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_t"
    "ool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁ou"
    "tput▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_ou"
    "tput_first = false %}{%- else %}{{'<｜tool▁output▁begin｜>' + message['content'] +"
    " '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %"
    "}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_"
    "tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";

/* DeepSeek-V3.1, Kimi-K2-Instruct and Kimi-K2-Thinking (sources: tests/golden/chat_kimi/README.md;
 * the same text is in scripts/templates/). */
static const char numla_tmpl_kimi_k2[] =
    "{% if tools -%}\n"
    "    {{ '<|im_system|>tool_declare<|im_middle|>' -}}\n"
    "    {{- tools | tojson -}}\n"
    "    {{ '<|im_end|>' -}}\n"
    "{%- endif -%}\n"
    "\n"
    "{%- for message in messages -%}\n"
    "  {%- if loop.first and messages[0]['role'] != 'system' -%}\n"
    "    {{ '<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>' }}\n"
    "  {%- endif -%}\n"
    "  {%- if message['role'] == 'system' -%}\n"
    "    {{ '<|im_system|>system<|im_middle|>' }}\n"
    "  {%- elif message['role'] == 'user' -%}\n"
    "    {{ '<|im_user|>user<|im_middle|>' }}\n"
    "  {%- elif message['role'] == 'assistant' -%}\n"
    "    {{ '<|im_assistant|>assistant<|im_middle|>' }}\n"
    "  {%- elif message['role'] == 'tool' -%}\n"
    "    {{ '<|im_system|>tool<|im_middle|>' }}\n"
    "  {%- endif -%}\n"
    "\n"
    "  {%- if message['content'] is string -%}\n"
    "    {{- message['content'] + '<|im_end|>' -}}\n"
    "  {%- else -%}\n"
    "    {%- for content in message['content'] -%}\n"
    "      {%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}\n"
    "        {{ '<|media_start|>image<|media_content|><|media_pad|><|media_end|>' }}\n"
    "      {%- else -%}\n"
    "        {{ content['text'] }}\n"
    "      {%- endif -%}\n"
    "    {%- endfor -%}\n"
    "    {{ '<|im_end|>' }}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}\n"
    "\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{ '<|im_assistant|>assistant<|im_middle|>' }}\n"
    "{%- endif -%}";

static const char numla_tmpl_kimi_k2_thinking[] =
    "{%- macro render_content(msg) -%}\n"
    "    {%- set c = msg.get('content') -%}\n"
    "    {%- if c is string -%}\n"
    "      {{ c }}\n"
    "    {%- elif c is not none -%}\n"
    "      {% for content in c -%}\n"
    "        {% if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}\n"
    "          <|media_start|>image<|media_content|><|media_pad|><|media_end|>\n"
    "        {% else -%}\n"
    "          {{ content['text'] }}\n"
    "        {%- endif -%}\n"
    "      {%- endfor -%}\n"
    "    {%- endif -%}\n"
    "{%- endmacro -%}\n"
    "\n"
    "{% macro set_roles(message) -%}\n"
    "  {%- set role_name =  message.get('name') or  message['role'] -%}\n"
    "  {%- if message['role'] == 'user' -%}\n"
    "    <|im_user|>{{role_name}}<|im_middle|>\n"
    "  {%- elif message['role'] == 'assistant' -%}\n"
    "    <|im_assistant|>{{role_name}}<|im_middle|>\n"
    "  {%- else -%}\n"
    "    <|im_system|>{{role_name}}<|im_middle|>\n"
    "  {%- endif -%}\n"
    "{%- endmacro -%}\n"
    "\n"
    "\n"
    "{%- macro render_toolcalls(message) -%}\n"
    "  <|tool_calls_section_begin|>\n"
    "  {%- for tool_call in message['tool_calls'] -%}\n"
    "    {%- set formatted_id = tool_call['id'] -%}\n"
    "    <|tool_call_begin|>{{ formatted_id }}<|tool_call_argument_begin|>{% if tool_call['function']['arguments'] is string %}{{ tool_call['function']['arguments'] }}{% else %}{{ tool_call['function']['arguments'] | tojson }}{% endif %}<|tool_call_end|>\n"
    "  {%- endfor -%}\n"
    "  <|tool_calls_section_end|>\n"
    "{%- endmacro -%}\n"
    "\n"
    "\n"
    "{# Find last non-tool-call assisitant message #}\n"
    "{%- set ns = namespace(last_non_tool_call_assistant_msg=-1) -%}\n"
    "{%- for idx in range(messages|length-1, -1, -1) -%}\n"
    "    {%- if messages[idx]['role'] == 'assistant' and not messages[idx].get('tool_calls') -%}\n"
    "        {%- set ns.last_non_tool_call_assistant_msg = idx -%}\n"
    "        {%- break -%}\n"
    "    {%- endif -%}\n"
    "{%- endfor -%}\n"
    "\n"
    "{# split all messages into history & suffix, reasoning_content in suffix should be reserved.#}\n"
    "{%- set hist_msgs = messages[:ns.last_non_tool_call_assistant_msg+1] -%}\n"
    "{%- set suffix_msgs = messages[ns.last_non_tool_call_assistant_msg+1:] -%}\n"
    "\n"
    "{%- if tools -%}\n"
    "  <|im_system|>tool_declare<|im_middle|>{{ tools | tojson() }}<|im_end|>\n"
    "{%- endif -%}\n"
    "\n"
    "{%- if messages|length == 0 or messages[0]['role'] != 'system' -%}\n"
    "  <|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>\n"
    "{%- endif -%}\n"
    "  \n"
    "{%- for message in hist_msgs -%}\n"
    "  {{set_roles(message)}}\n"
    "  {%- if message['role'] == 'assistant' -%}\n"
    "    <think></think>{{render_content(message)}}\n"
    "    {%- if message.get('tool_calls') -%}\n"
    "      {{render_toolcalls(message)}}\n"
    "    {%- endif -%}\n"
    "  {%- elif message['role'] == 'tool' -%}\n"
    "    {%- set tool_call_id = message.tool_call_id -%}\n"
    "    ## Return of {{ tool_call_id }}\n"
    "{{render_content(message)}}\n"
    "  {%- elif message['content'] is not none -%}\n"
    "    {{render_content(message)}}\n"
    "  {%- endif -%}\n"
    "  <|im_end|>\n"
    "{%- endfor -%}\n"
    "\n"
    "{%- for message in suffix_msgs -%}\n"
    "  {{set_roles(message)}}\n"
    "  {%- if message['role'] == 'assistant' -%}\n"
    "    {%- set rc = message.get('reasoning_content', '') -%}\n"
    "    <think>{{rc}}</think>{{render_content(message)}}\n"
    "    {%- if message.get('tool_calls') -%}\n"
    "     {{render_toolcalls(message)}}\n"
    "    {%- endif -%}\n"
    "  {%- elif message['role'] == 'tool' -%}\n"
    "    {%- set tool_call_id = message.tool_call_id -%}\n"
    "    ## Return of {{ tool_call_id }}\n"
    "{{render_content(message)}}\n"
    "  {%- elif message['content'] is not none -%}\n"
    "    {{render_content(message)}}\n"
    "  {%- endif -%}\n"
    "  <|im_end|>\n"
    "{%- endfor -%}\n"
    "\n"
    "\n"
    "{%- if add_generation_prompt -%}\n"
    "  <|im_assistant|>assistant<|im_middle|>\n"
    "{%- endif -%}\n";

static const char numla_tmpl_deepseek_v3_1[] =
    "{% if not add_generation_prompt is defined -%}\n"
    "  {%- set add_generation_prompt = false -%}\n"
    "{%- endif -%}\n"
    "{%- if not thinking is defined -%}\n"
    "  {%- if enable_thinking is defined -%}\n"
    "    {%- set thinking = enable_thinking -%}\n"
    "    {%- else -%}\n"
    "    {%- set thinking = false -%}\n"
    "  {%- endif -%}\n"
    "{%- endif -%}\n"
    "{%- set ns = namespace(is_first=false, is_tool=false, system_prompt='', is_first_sp=true, is_last_user=false) -%}\n"
    "{%- for message in messages -%}\n"
    "  {%- if message['role'] == 'system' -%}\n"
    "    {%- if ns.is_first_sp -%}\n"
    "      {%- set ns.system_prompt = ns.system_prompt + message['content'] -%}\n"
    "      {%- set ns.is_first_sp = false -%}\n"
    "      {%- else -%}\n"
    "      {%- set ns.system_prompt = ns.system_prompt + '\n"
    "\n"
    "' + message['content'] -%}\n"
    "    {%- endif -%}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}{{ bos_token }}{{ ns.system_prompt }}\n"
    "{%- for message in messages -%}\n"
    "  {%- if message['role'] == 'user' -%}\n"
    "    {%- set ns.is_tool = false -%}\n"
    "    {%- set ns.is_first = false -%}\n"
    "    {%- set ns.is_last_user = true -%}{{'<｜User｜>' + message['content']}}\n"
    "  {%- endif -%}\n"
    "  {%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] is not none -%}\n"
    "    {%- if ns.is_last_user -%}{{'<｜Assistant｜></think>'}}\n"
    "    {%- endif -%}\n"
    "    {%- set ns.is_last_user = false -%}\n"
    "    {%- set ns.is_first = false -%}\n"
    "    {%- set ns.is_tool = false -%}\n"
    "    {%- for tool in message['tool_calls'] -%}\n"
    "      {%- if not ns.is_first -%}\n"
    "        {%- if message['content'] is none -%}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}\n"
    "          {%- else -%}{{message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}\n"
    "        {%- endif -%}\n"
    "        {%- set ns.is_first = true -%}\n"
    "        {%- else -%}{{'<｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}\n"
    "      {%- endif -%}\n"
    "    {%- endfor -%}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}\n"
    "  {%- endif -%}\n"
    "  {%- if message['role'] == 'assistant' and (message['tool_calls'] is not defined or message['tool_calls'] is none) -%}\n"
    "    {%- if ns.is_last_user -%}{{'<｜Assistant｜>'}}\n"
    "      {%- if message['prefix'] is defined and message['prefix'] and thinking -%}{{'<think>'}}\n"
    "        {%- else -%}{{'</think>'}}\n"
    "      {%- endif -%}\n"
    "    {%- endif -%}\n"
    "    {%- set ns.is_last_user = false -%}\n"
    "    {%- if ns.is_tool -%}{{message['content'] + '<｜end▁of▁sentence｜>'}}\n"
    "      {%- set ns.is_tool = false -%}\n"
    "      {%- else -%}\n"
    "      {%- set content = message['content'] -%}\n"
    "      {%- if '</think>' in content -%}\n"
    "        {%- set content = content.split('</think>', 1)[1] -%}\n"
    "      {%- endif -%}{{content + '<｜end▁of▁sentence｜>'}}\n"
    "    {%- endif -%}\n"
    "  {%- endif -%}\n"
    "  {%- if message['role'] == 'tool' -%}\n"
    "    {%- set ns.is_last_user = false -%}\n"
    "    {%- set ns.is_tool = true -%}{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt and ns.is_last_user and not ns.is_tool -%}{{'<｜Assistant｜>'}}\n"
    "  {%- if not thinking -%}{{'</think>'}}\n"
    "    {%- else -%}{{'<think>'}}\n"
    "  {%- endif -%}\n"
    "{%- endif %}";

typedef struct numla_chat_builtin {
    const char *name;
    numla_chat_kind kind;
    const char *source;
} numla_chat_builtin;

static const numla_chat_builtin numla_chat_builtins[] = {
    {"deepseek-v2", NUMLA_CHAT_KIND_V2, numla_tmpl_v2},
    {"deepseek-v2.5", NUMLA_CHAT_KIND_V2_5, numla_tmpl_v2_5},
    {"deepseek-v3", NUMLA_CHAT_KIND_V3, numla_tmpl_v3},
    {"deepseek-r1", NUMLA_CHAT_KIND_R1, numla_tmpl_r1},
    {"deepseek-v3.1", NUMLA_CHAT_KIND_V3_1, numla_tmpl_deepseek_v3_1},
    {"kimi-k2", NUMLA_CHAT_KIND_KIMI_K2, numla_tmpl_kimi_k2},
    {"kimi-k2-thinking", NUMLA_CHAT_KIND_KIMI_K2_THINKING, numla_tmpl_kimi_k2_thinking},
    {"glm-5", NUMLA_CHAT_KIND_GLM_5, numla_chat_tmpl_glm5},
    /* no Jinja source: DeepSeek ships Python (chat_template_dsv32.c); forced by name only */
    {"deepseek-v3.2", NUMLA_CHAT_KIND_DEEPSEEK_V3_2, NULL},
};
#define NUMLA_CHAT_NBUILTIN ((int)(sizeof numla_chat_builtins / sizeof numla_chat_builtins[0]))

static const char *const numla_chat_name_list[] = {
    "deepseek-v2", "deepseek-v2.5", "deepseek-v3", "deepseek-r1", "deepseek-v3.1", "kimi-k2",
    "kimi-k2-thinking", "glm-5", "deepseek-v3.2", NULL};
#define NUMLA_CHAT_NAMES_TEXT                                                                    \
    "deepseek-v2, deepseek-v2.5, deepseek-v3, deepseek-r1, deepseek-v3.1, kimi-k2, "             \
    "kimi-k2-thinking, glm-5, deepseek-v3.2"

/* DeepSeek's special-token strings: the defaults when no tokenizer_config.json is at hand. */
#define NUMLA_CHAT_BOS "<｜begin▁of▁sentence｜>"
#define NUMLA_CHAT_EOS "<｜end▁of▁sentence｜>"

struct numla_chat_template {
    const numla_chat_builtin *builtin;
    char *bos; /* bos_token as the template sees it ("" when unset) */
    char *eos; /* eos_token likewise */
};

const char *const *numla_chat_template_names(void) { return numla_chat_name_list; }

int numla_chat_template_known(const char *name)
{
    for (int i = 0; name && i < NUMLA_CHAT_NBUILTIN; i++)
        if (strcmp(numla_chat_builtins[i].name, name) == 0)
            return 1;
    return 0;
}

const char *numla_chat_template_source(const char *name)
{
    for (int i = 0; name && i < NUMLA_CHAT_NBUILTIN; i++)
        if (strcmp(numla_chat_builtins[i].name, name) == 0)
            return numla_chat_builtins[i].source;
    return NULL;
}

/* The recognition fingerprint: CRLF -> LF, the escape "\n" -> newline, outer whitespace cut.
 * malloc'd; NULL when out of memory. */
static char *fingerprint(const char *s)
{
    size_t n = strlen(s);
    char *f = malloc(n + 1);
    if (!f)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r' && s[i + 1] == '\n')
            continue;
        if (s[i] == '\\' && s[i + 1] == 'n') {
            f[k++] = '\n';
            i++;
            continue;
        }
        f[k++] = s[i];
    }
    size_t a = 0;
    while (a < k && (f[a] == ' ' || f[a] == '\n' || f[a] == '\t'))
        a++;
    while (k > a && (f[k - 1] == ' ' || f[k - 1] == '\n' || f[k - 1] == '\t'))
        k--;
    memmove(f, f + a, k - a);
    f[k - a] = 0;
    return f;
}

static numla_status recognise(const char *tmpl, const numla_chat_builtin **out)
{
    *out = NULL;
    char *fp = fingerprint(tmpl);
    if (!fp)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template fingerprint");
    for (int i = 0; i < NUMLA_CHAT_NBUILTIN && !*out; i++) {
        if (!numla_chat_builtins[i].source)
            continue;
        char *known = fingerprint(numla_chat_builtins[i].source);
        if (!known) {
            free(fp);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template fingerprint");
        }
        if (strcmp(fp, known) == 0)
            *out = &numla_chat_builtins[i];
        free(known);
    }
    free(fp);
    return NUMLA_STATUS_OK;
}

/* A special token of tokenizer_config.json: a string, an AddedToken object's "content", or
 * absent/null (""). */
static numla_status config_token(json_t *cfg, const char *key, const char *dflt, char **out)
{
    json_t *v = cfg ? json_object_get(cfg, key) : NULL;
    const char *s = dflt;
    if (cfg) {
        s = "";
        if (json_is_object(v))
            v = json_object_get(v, "content");
        if (json_is_string(v))
            s = json_string_value(v);
        else if (v && !json_is_null(v))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                              "tokenizer_config.json: %s is neither a string nor a token object",
                              key);
    }
    *out = strdup(s);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "tokenizer_config.json %s", key);
    return NUMLA_STATUS_OK;
}

/* The template string of the config: a string, or the "default" entry of a list of
 * {"name", "template"} objects; NULL when there is none. */
static const char *config_template(json_t *cfg)
{
    json_t *v = json_object_get(cfg, "chat_template");
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && strcmp(name, "default") == 0)
                return json_string_value(json_object_get(e, "template"));
        }
    }
    return NULL;
}

static numla_status load_parsed(json_t *cfg, const char *what, const char *force_name,
                                const char *jinja, numla_chat_template **out)
{
    const numla_chat_builtin *b = NULL;
    if (force_name) {
        for (int i = 0; i < NUMLA_CHAT_NBUILTIN; i++)
            if (strcmp(numla_chat_builtins[i].name, force_name) == 0)
                b = &numla_chat_builtins[i];
        if (!b)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                              "--chat-template %s: unknown chat template (built-in: %s)",
                              force_name, NUMLA_CHAT_NAMES_TEXT);
    } else {
        const char *tmpl = cfg ? config_template(cfg) : NULL;
        if (!tmpl)
            tmpl = jinja; /* chat_template.jinja beside it (Kimi-K2-Thinking ships one) */
        if (!tmpl)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "%s has no chat_template; pick a built-in one with "
                              "--chat-template NAME (%s)",
                              what, NUMLA_CHAT_NAMES_TEXT);
        NUMLA_CHECK(recognise(tmpl, &b));
        if (!b)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "%s: chat_template (starting \"%.60s\") is not one of the DeepSeek / "
                              "Kimi / GLM templates numla renders; pick a built-in one with "
                              "--chat-template NAME (%s)",
                              what, tmpl, NUMLA_CHAT_NAMES_TEXT);
    }
    numla_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template");
    t->builtin = b;
    numla_status s = config_token(cfg, "bos_token", NUMLA_CHAT_BOS, &t->bos);
    if (s == NUMLA_STATUS_OK)
        s = config_token(cfg, "eos_token", NUMLA_CHAT_EOS, &t->eos);
    if (s != NUMLA_STATUS_OK) {
        numla_chat_template_destroy(&t);
        return s;
    }
    *out = t;
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_template_load_builtin(const char *name, numla_chat_template **out)
{
    *out = NULL;
    if (!name)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "chat template name missing (built-in: %s)",
                   NUMLA_CHAT_NAMES_TEXT);
    return load_parsed(NULL, "built-in chat template", name, NULL, out);
}

const char *numla_chat_template_builtin_for_model_type(const char *model_type)
{
    return model_type && strcmp(model_type, "deepseek_v32") == 0 ? "deepseek-v3.2" : NULL;
}

numla_status numla_chat_template_load_json(const char *json, const char *force_name,
                                           numla_chat_template **out)
{
    *out = NULL;
    json_t *cfg = NULL;
    if (json) {
        NUMLA_CHECK(numla_json_text_parse(json, strlen(json), 0, "tokenizer_config.json", &cfg));
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: not an object");
        }
    }
    numla_status s = load_parsed(cfg, "tokenizer_config.json", force_name, NULL, out);
    json_decref(cfg);
    return s;
}

numla_status numla_chat_template_load(const char *model_dir, const char *force_name,
                                      numla_chat_template **out)
{
    *out = NULL;
    char path[4096];
    int w = snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    if (w < 0 || (size_t)w >= sizeof path)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model directory path too long: %s",
                          model_dir);
    /* a separate chat_template.jinja is used when tokenizer_config.json has no chat_template */
    char jpath[4096];
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", model_dir);
    char *jinja = NULL;
    FILE *jf = fopen(jpath, "rb");
    if (jf) {
        long n = fseek(jf, 0, SEEK_END) == 0 ? ftell(jf) : -1;
        if (n >= 0 && n < (16L << 20) && fseek(jf, 0, SEEK_SET) == 0 &&
            (jinja = malloc((size_t)n + 1)) != NULL) {
            if (fread(jinja, 1, (size_t)n, jf) != (size_t)n) {
                free(jinja);
                jinja = NULL;
            } else {
                jinja[n] = 0;
            }
        }
        fclose(jf);
    }
    json_t *cfg = NULL;
    if (numla_json_file_read(path, 0, &cfg) != NUMLA_STATUS_OK) {
        if (!force_name) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", numla_error_message());
            free(jinja);
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s; without it pick a built-in chat template with --chat-template NAME "
                       "(%s)", msg, NUMLA_CHAT_NAMES_TEXT);
        }
        numla_error_clear(); /* a forced template needs no tokenizer_config.json */
    }
    if (cfg && !json_is_object(cfg)) {
        json_decref(cfg);
        free(jinja);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: not a JSON object", path);
    }
    numla_status s = load_parsed(cfg, path, force_name, jinja, out);
    json_decref(cfg);
    free(jinja);
    return s;
}

void numla_chat_template_destroy(numla_chat_template **t)
{
    if (!t || !*t)
        return;
    free((*t)->bos);
    free((*t)->eos);
    free(*t);
    *t = NULL;
}

const char *numla_chat_template_name(const numla_chat_template *t) { return t->builtin->name; }

/* ---- rendering ---- */

/* Appends whose failure b->oom records: rendering checks once at the end. */
static void put_n(numla_strbuf *b, const char *s, size_t len) { numla_strbuf_append(b, s, len); }

static void put(numla_strbuf *b, const char *s) { numla_strbuf_puts(b, s); }

static int is_role(const numla_chat_message *m, const char *role)
{
    return strcmp(m->role, role) == 0;
}

/* Every system message's content, in order, joined by "\n\n" (the V3 and V3.1 templates). */
static void put_systems_joined(const numla_chat_message *msgs, int n, numla_strbuf *b)
{
    int first = 1;
    for (int i = 0; i < n; i++)
        if (is_role(&msgs[i], "system")) {
            if (!first)
                put(b, "\n\n");
            put(b, msgs[i].content);
            first = 0;
        }
}

/* The literals of the V2.5 / V3 / R1 templates. */
#define T_USER "<｜User｜>"
#define T_ASSISTANT "<｜Assistant｜>"
#define T_EOS_LITERAL "<｜end▁of▁sentence｜>"
#define T_OUTPUTS_BEGIN "<｜tool▁outputs▁begin｜>"
#define T_OUTPUTS_END "<｜tool▁outputs▁end｜>"
#define T_OUTPUT_BEGIN "<｜tool▁output▁begin｜>"
#define T_OUTPUT_END "<｜tool▁output▁end｜>"

static void render_v2(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                      int agp, numla_strbuf *b)
{
    put(b, t->bos);
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (is_role(m, "user")) {
            put(b, "User: ");
            put(b, m->content);
            put(b, "\n\n");
        } else if (is_role(m, "assistant")) {
            put(b, "Assistant: ");
            put(b, m->content);
            put(b, t->eos);
        } else if (is_role(m, "system")) {
            put(b, m->content);
            put(b, "\n\n");
        }
    }
    if (agp)
        put(b, "Assistant:");
}

/* V2.5, V3 and R1 share one walk; they differ in the system prompt, the separator between tool
 * outputs, R1's reasoning strip and R1's generation prompt. */
static void render_turns(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                         int agp, numla_strbuf *b)
{
    numla_chat_kind kind = t->builtin->kind;
    if (kind == NUMLA_CHAT_KIND_V2_5) {
        /* The last system message wins; each one also emits the spaces in front of the
         * template's {% set %}, which precede the BOS token. */
        const char *sp = "";
        for (int i = 0; i < n; i++)
            if (is_role(&msgs[i], "system")) {
                put(b, "        ");
                sp = msgs[i].content;
            }
        put(b, t->bos);
        put(b, sp);
    } else {
        put(b, t->bos);
        put_systems_joined(msgs, n, b);
    }
    int is_tool = 0, output_first = 1;
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (is_role(m, "user")) {
            is_tool = 0;
            put(b, T_USER);
            put(b, m->content);
        } else if (is_role(m, "assistant")) {
            if (is_tool) {
                put(b, T_OUTPUTS_END);
                put(b, m->content);
                put(b, T_EOS_LITERAL);
                is_tool = 0;
            } else {
                const char *c = m->content;
                if (kind == NUMLA_CHAT_KIND_R1) {
                    /* content.split('</think>')[-1]: what follows the last "</think>". */
                    for (const char *p = strstr(c, "</think>"); p; p = strstr(p + 1, "</think>"))
                        c = p + strlen("</think>");
                }
                put(b, T_ASSISTANT);
                put(b, c);
                put(b, T_EOS_LITERAL);
            }
        } else if (is_role(m, "tool")) {
            is_tool = 1;
            if (output_first) {
                put(b, T_OUTPUTS_BEGIN);
                output_first = 0;
            } else if (kind != NUMLA_CHAT_KIND_R1) {
                put(b, "\n");
            }
            put(b, T_OUTPUT_BEGIN);
            put(b, m->content);
            put(b, T_OUTPUT_END);
        }
    }
    if (is_tool)
        put(b, T_OUTPUTS_END);
    if (agp && !is_tool)
        put(b, kind == NUMLA_CHAT_KIND_R1 ? T_ASSISTANT "<think>\n" : T_ASSISTANT);
}

/* ---- DeepSeek-V3.1 and Kimi ---- */

/* Python's repr of a double (shortest round trip; exponent form below 1e-4 and from 1e16). */
static void put_py_float(numla_strbuf *b, double v)
{
    char digits[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, v);
        if (strtod(digits, NULL) == v)
            break;
    }
    /* digits: [-]d.ddde[+-]XX; take the mantissa digits and the exponent */
    char mant[24];
    size_t k = 0;
    const char *p = digits;
    int neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            mant[k++] = *p;
    mant[k] = 0;
    int exp = atoi(p + 1);
    while (k > 1 && mant[k - 1] == '0')
        mant[--k] = 0;
    char o[64];
    size_t n = 0;
    if (neg)
        o[n++] = '-';
    if (exp < -4 || exp >= 16) {
        o[n++] = mant[0];
        if (k > 1) {
            o[n++] = '.';
            memcpy(o + n, mant + 1, k - 1);
            n += k - 1;
        }
        n += (size_t)snprintf(o + n, sizeof o - n, "e%c%02d", exp < 0 ? '-' : '+',
                              exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        o[n++] = '0';
        o[n++] = '.';
        for (int z = 0; z < -exp - 1; z++)
            o[n++] = '0';
        memcpy(o + n, mant, k);
        n += k;
    } else {
        for (int d = 0; d <= exp; d++)
            o[n++] = (size_t)d < k ? mant[d] : '0';
        o[n++] = '.';
        if ((size_t)exp + 1 < k) {
            memcpy(o + n, mant + exp + 1, k - (size_t)exp - 1);
            n += k - (size_t)exp - 1;
        } else {
            o[n++] = '0';
        }
    }
    put_n(b, o, n);
}

static void put_py_string(numla_strbuf *b, const char *s, size_t len)
{
    put(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        switch (c) {
        case '"': put(b, "\\\""); break;
        case '\\': put(b, "\\\\"); break;
        case '\n': put(b, "\\n"); break;
        case '\r': put(b, "\\r"); break;
        case '\t': put(b, "\\t"); break;
        case '\b': put(b, "\\b"); break;
        case '\f': put(b, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", c);
                put(b, e);
            } else {
                put_n(b, (const char *)&s[i], 1);
            }
        }
    }
    put(b, "\"");
}

/* v as Python's json.dumps(v, ensure_ascii=False) writes it (transformers' tojson): ", " and
 * ": " separators, keys in their order, non-ASCII as is. */
static void put_py_json(numla_strbuf *b, json_t *v)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        put(b, "{");
        const char *key;
        json_t *x;
        int first = 1;
        json_object_foreach(v, key, x) {
            if (!first)
                put(b, ", ");
            first = 0;
            put_py_string(b, key, strlen(key));
            put(b, ": ");
            put_py_json(b, x);
        }
        put(b, "}");
        break;
    }
    case JSON_ARRAY: {
        put(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (i)
                put(b, ", ");
            put_py_json(b, x);
        }
        put(b, "]");
        break;
    }
    case JSON_STRING:
        put_py_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        put(b, num);
        break;
    case JSON_REAL:
        put_py_float(b, json_real_value(v));
        break;
    case JSON_TRUE: put(b, "true"); break;
    case JSON_FALSE: put(b, "false"); break;
    default: put(b, "null"); break;
    }
}

void numla_chat_put_py_json(numla_strbuf *b, json_t *v) { put_py_json(b, v); }

int numla_chat_json_truthy(const json_t *v)
{
    return !(!v || json_is_null(v) || json_is_false(v) ||
             (json_is_array(v) && json_array_size(v) == 0) ||
             (json_is_object(v) && json_object_size(v) == 0) ||
             (json_is_string(v) && json_string_length(v) == 0) ||
             (json_is_integer(v) && json_integer_value(v) == 0) ||
             (json_is_real(v) && json_real_value(v) == 0.0));
}

numla_status numla_chat_tools_parse(const char *tools_json, const char *template_name,
                                    json_t **out)
{
    *out = NULL;
    if (!tools_json)
        return NUMLA_STATUS_OK;
    json_error_t err;
    json_t *tools = json_loads(tools_json, JSON_DECODE_ANY, &err);
    if (!tools)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tools: not JSON (%s)", err.text);
    if (!numla_chat_json_truthy(tools)) {
        json_decref(tools);
        return NUMLA_STATUS_OK;
    }
    if (!json_is_array(tools)) {
        json_decref(tools);
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tools: not an array (the %s template lists each "
                                             "tool)", template_name);
    }
    *out = tools;
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_tool_arguments(const numla_chat_message *m, int i, int k,
                                       const char *template_name, json_t **out)
{
    json_error_t err;
    *out = json_loads(m->tool_calls[k].arguments, JSON_DECODE_ANY, &err);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "messages[%d].tool_calls[%d].function.arguments is not a JSON object (the %s "
                   "template writes its keys one by one)", i, k, template_name);
    }
    return NUMLA_STATUS_OK;
}

#define K_SYS "<|im_system|>"
#define K_USER "<|im_user|>"
#define K_ASSISTANT "<|im_assistant|>"
#define K_MIDDLE "<|im_middle|>"
#define K_END "<|im_end|>"

static numla_status put_tools(numla_strbuf *b, const char *tools_json)
{
    json_error_t err;
    json_t *tools = json_loads(tools_json, JSON_DECODE_ANY, &err);
    if (!tools)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tools: not JSON (%s)", err.text);
    /* `if tools`: an empty list or object, false, null, 0 and "" declare nothing */
    if (numla_chat_json_truthy(tools)) {
        put(b, K_SYS "tool_declare" K_MIDDLE);
        put_py_json(b, tools);
        put(b, K_END);
    }
    json_decref(tools);
    return NUMLA_STATUS_OK;
}

static void render_kimi_k2(const numla_chat_message *msgs, int n, int agp, numla_strbuf *b)
{
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (i == 0 && !is_role(&msgs[0], "system"))
            put(b, K_SYS "system" K_MIDDLE "You are a helpful assistant" K_END);
        if (is_role(m, "system"))
            put(b, K_SYS "system" K_MIDDLE);
        else if (is_role(m, "user"))
            put(b, K_USER "user" K_MIDDLE);
        else if (is_role(m, "assistant"))
            put(b, K_ASSISTANT "assistant" K_MIDDLE);
        else if (is_role(m, "tool"))
            put(b, K_SYS "tool" K_MIDDLE);
        if (m->content)
            put(b, m->content);
        put(b, K_END);
    }
    if (agp)
        put(b, K_ASSISTANT "assistant" K_MIDDLE);
}

static void kimi_thinking_message(const numla_chat_message *m, int suffix, numla_strbuf *b)
{
    const char *rn = m->name && *m->name ? m->name : m->role;
    put(b, is_role(m, "user") ? K_USER : is_role(m, "assistant") ? K_ASSISTANT : K_SYS);
    put(b, rn);
    put(b, K_MIDDLE);
    if (is_role(m, "assistant")) {
        put(b, "<think>");
        if (suffix && m->reasoning_content)
            put(b, m->reasoning_content);
        put(b, "</think>");
        if (m->content)
            put(b, m->content);
        if (m->num_tool_calls > 0) {
            put(b, "<|tool_calls_section_begin|>");
            for (int k = 0; k < m->num_tool_calls; k++) {
                put(b, "<|tool_call_begin|>");
                if (m->tool_calls[k].id)
                    put(b, m->tool_calls[k].id);
                put(b, "<|tool_call_argument_begin|>");
                if (m->tool_calls[k].arguments)
                    put(b, m->tool_calls[k].arguments);
                put(b, "<|tool_call_end|>");
            }
            put(b, "<|tool_calls_section_end|>");
        }
    } else if (is_role(m, "tool")) {
        put(b, "## Return of ");
        if (m->tool_call_id)
            put(b, m->tool_call_id);
        put(b, "\n");
        if (m->content)
            put(b, m->content);
    } else if (m->content) {
        put(b, m->content);
    }
    put(b, K_END);
}

static void render_kimi_k2_thinking(const numla_chat_message *msgs, int n, int agp,
                                    numla_strbuf *b)
{
    /* the last assistant message without tool calls ends the history; reasoning_content is
     * kept only after it */
    int last = -1;
    for (int i = n - 1; i >= 0 && last < 0; i--)
        if (is_role(&msgs[i], "assistant") && msgs[i].num_tool_calls == 0)
            last = i;
    if (n == 0 || !is_role(&msgs[0], "system"))
        put(b, K_SYS "system" K_MIDDLE "You are Kimi, an AI assistant created by Moonshot AI." K_END);
    for (int i = 0; i < n; i++)
        kimi_thinking_message(&msgs[i], i > last, b);
    if (agp)
        put(b, K_ASSISTANT "assistant" K_MIDDLE);
}

static void render_v3_1(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                        int agp, int thinking, numla_strbuf *b)
{
    put(b, t->bos);
    put_systems_joined(msgs, n, b);
    int is_tool = 0, is_last_user = 0;
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (is_role(m, "user")) {
            is_tool = 0;
            is_last_user = 1;
            put(b, T_USER);
            put(b, m->content);
        }
        if (is_role(m, "assistant") && m->has_tool_calls) {
            if (is_last_user)
                put(b, T_ASSISTANT "</think>");
            is_last_user = 0;
            is_tool = 0;
            for (int k = 0; k < m->num_tool_calls; k++) {
                if (k == 0) {
                    if (m->content)
                        put(b, m->content);
                    put(b, "<｜tool▁calls▁begin｜>");
                }
                put(b, "<｜tool▁call▁begin｜>");
                put(b, m->tool_calls[k].name);
                put(b, "<｜tool▁sep｜>");
                put(b, m->tool_calls[k].arguments);
                put(b, "<｜tool▁call▁end｜>");
            }
            put(b, "<｜tool▁calls▁end｜>" T_EOS_LITERAL);
        }
        if (is_role(m, "assistant") && !m->has_tool_calls) {
            if (is_last_user)
                put(b, T_ASSISTANT "</think>");
            is_last_user = 0;
            if (is_tool) {
                put(b, m->content);
                is_tool = 0;
            } else {
                /* content.split('</think>', 1)[1]: what follows the first "</think>" */
                const char *c = m->content, *p = strstr(c, "</think>");
                put(b, p ? p + strlen("</think>") : c);
            }
            put(b, T_EOS_LITERAL);
        }
        if (is_role(m, "tool")) {
            is_last_user = 0;
            is_tool = 1;
            put(b, T_OUTPUT_BEGIN);
            put(b, m->content);
            put(b, T_OUTPUT_END);
        }
    }
    if (agp && is_last_user && !is_tool)
        put(b, thinking ? T_ASSISTANT "<think>" : T_ASSISTANT "</think>");
}

const char *const *numla_chat_template_stop_tokens(const numla_chat_template *t)
{
    static const char *const none[] = {NULL};
    static const char *const kimi[] = {K_END, NULL};
    /* GLM-5's generation config stops at <|user|> and <|observation|> besides its EOS */
    static const char *const glm[] = {"<|user|>", "<|observation|>", NULL};
    numla_chat_kind k = t->builtin->kind;
    if (k == NUMLA_CHAT_KIND_KIMI_K2 || k == NUMLA_CHAT_KIND_KIMI_K2_THINKING)
        return kimi;
    return k == NUMLA_CHAT_KIND_GLM_5 ? glm : none;
}

const char *numla_chat_template_end_of_turn(const numla_chat_template *t)
{
    return numla_chat_template_stop_tokens(t)[0];
}

int numla_chat_template_thinks(const numla_chat_template *t)
{
    numla_chat_kind k = t->builtin->kind;
    return k == NUMLA_CHAT_KIND_R1 || k == NUMLA_CHAT_KIND_V3_1 ||
           k == NUMLA_CHAT_KIND_KIMI_K2_THINKING || k == NUMLA_CHAT_KIND_GLM_5 ||
           k == NUMLA_CHAT_KIND_DEEPSEEK_V3_2;
}

/* What the V3.1 and Kimi templates cannot render (transformers refuses them too). */
static numla_status check_new_kinds(const numla_chat_template *t, const numla_chat_message *msgs,
                                    int n)
{
    numla_chat_kind kind = t->builtin->kind;
    const char *name = t->builtin->name;
    if (n == 0 && kind != NUMLA_CHAT_KIND_DEEPSEEK_V3_2) /* its encoding writes the BOS alone */
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages is empty (the %s template needs at "
                                             "least one message)", name);
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        for (int k = 0; k < m->num_tool_calls; k++)
            if (!m->tool_calls[k].name || !m->tool_calls[k].arguments)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                           "messages[%d].tool_calls[%d].function needs a name and arguments", i,
                           k);
        if (kind != NUMLA_CHAT_KIND_V3_1)
            continue;
        int needs_content = is_role(m, "user") || is_role(m, "tool") || is_role(m, "system") ||
                            (is_role(m, "assistant") && !m->has_tool_calls);
        if (needs_content && !m->content)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "messages[%d].content is null (the %s template "
                                                 "needs text there)", i, name);
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_template_render(const numla_chat_template *t,
                                        const numla_chat_message *msgs, int n,
                                        int add_generation_prompt, char **out, size_t *len)
{
    numla_chat_options o = {.add_generation_prompt = add_generation_prompt};
    return numla_chat_template_render_opts(t, msgs, n, &o, out, len);
}

numla_status numla_chat_template_render_opts(const numla_chat_template *t,
                                             const numla_chat_message *msgs, int n,
                                             const numla_chat_options *opts, char **out,
                                             size_t *len)
{
    *out = NULL;
    *len = 0;
    int add_generation_prompt = opts->add_generation_prompt;
    if (n < 0 || (n > 0 && !msgs))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "chat messages: bad count %d", n);
    numla_chat_kind kind = t->builtin->kind;
    if (kind == NUMLA_CHAT_KIND_V3_1 || kind == NUMLA_CHAT_KIND_KIMI_K2 ||
        kind == NUMLA_CHAT_KIND_KIMI_K2_THINKING || kind == NUMLA_CHAT_KIND_GLM_5 ||
        kind == NUMLA_CHAT_KIND_DEEPSEEK_V3_2) {
        for (int i = 0; i < n; i++)
            if (!msgs[i].role)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].role is missing", i);
        NUMLA_CHECK(check_new_kinds(t, msgs, n));
        numla_strbuf b = {0};
        numla_status st = NUMLA_STATUS_OK;
        if ((kind == NUMLA_CHAT_KIND_KIMI_K2 || kind == NUMLA_CHAT_KIND_KIMI_K2_THINKING) &&
            opts->tools_json)
            st = put_tools(&b, opts->tools_json);
        if (st == NUMLA_STATUS_OK) {
            if (kind == NUMLA_CHAT_KIND_GLM_5)
                st = numla_chat_render_glm5(msgs, n, opts, &b);
            else if (kind == NUMLA_CHAT_KIND_DEEPSEEK_V3_2)
                st = numla_chat_render_dsv32(msgs, n, opts, &b);
            else if (kind == NUMLA_CHAT_KIND_V3_1)
                render_v3_1(t, msgs, n, add_generation_prompt, opts->thinking, &b);
            else if (kind == NUMLA_CHAT_KIND_KIMI_K2)
                render_kimi_k2(msgs, n, add_generation_prompt, &b);
            else
                render_kimi_k2_thinking(msgs, n, add_generation_prompt, &b);
        }
        put_n(&b, "", 0);
        if (st != NUMLA_STATUS_OK || b.oom) {
            numla_strbuf_free(&b);
            NUMLA_CHECK(st);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "rendering %d chat messages", n);
        }
        *len = b.len;
        *out = numla_strbuf_take(&b);
        return NUMLA_STATUS_OK;
    }
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].role is missing", i);
        if (msgs[i].has_tool_calls || msgs[i].num_tool_calls)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "messages[%d].tool_calls: tool calls are not supported by numla's "
                              "%s chat template",
                              i, t->builtin->name);
        if (!msgs[i].content)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "messages[%d].content is null (tool calls are not supported by "
                              "numla's %s chat template)",
                              i, t->builtin->name);
    }
    numla_strbuf b = {0};
    if (t->builtin->kind == NUMLA_CHAT_KIND_V2)
        render_v2(t, msgs, n, add_generation_prompt, &b);
    else
        render_turns(t, msgs, n, add_generation_prompt, &b);
    put_n(&b, "", 0);
    if (b.oom) {
        numla_strbuf_free(&b);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "rendering %d chat messages", n);
    }
    *len = b.len;
    *out = numla_strbuf_take(&b);
    return NUMLA_STATUS_OK;
}
