/* default_chat_template.h - the chat template make-model writes into the
 * models it generates: ChatML with Qwen3.5's conventions (thinking prefix in
 * the generation prompt, reasoning kept only after the last user turn, tools
 * in the system turn, tool results in <tool_response> inside a user turn; an
 * image part of a user turn as <|vision_start|><|image_pad|><|vision_end|>,
 * as Qwen's own templates write it). */
#ifndef DS_DEFAULT_CHAT_TEMPLATE_H
#define DS_DEFAULT_CHAT_TEMPLATE_H

extern const char DS_DEFAULT_CHAT_TEMPLATE[];

#endif
