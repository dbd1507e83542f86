"""The chat-template methods every checkpoint tokenizer shares."""

from keras_tfm.lite.chat_template import render_chat_template


class ChatTemplateMixin:
    """`apply_chat_template` and `template_tokens` for a tokenizer with
    `chat_template`, `bos_token`, `eos_token` and `pad_token` attributes
    (set, checked, by `_set_roles`)."""

    def _set_roles(self, bos_token, eos_token, pad_token, chat_template):
        """Stores the template and the special tokens' roles (their ids as
        keras-hub's `start_token_id`, `end_token_id`, `pad_token_id`)."""
        if chat_template is not None and not isinstance(chat_template, str):
            raise ValueError(
                "`chat_template` must be a string or None. Received: "
                f"chat_template={chat_template!r}"
            )
        self.chat_template = chat_template
        self.bos_token, self.eos_token, self.pad_token = bos_token, eos_token, pad_token
        for token, role in (
            (bos_token, "start_token"),
            (eos_token, "end_token"),
            (pad_token, "pad_token"),
        ):
            if token is not None:
                self._add_special_token(token, role)

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """The conversation as text, formatted by the checkpoint's template.

        Args:
            messages: a string (one user message) or a list of {"role",
                "content"} dicts (roles "system", "user", "assistant").
            add_generation_prompt: end with the opening of the assistant's
                turn, for generating its answer.

        Returns:
            The formatted text (tokenize it to get ids; the special tokens in
            it become single ids).
        """
        if self.chat_template is None:
            raise ValueError(
                "This tokenizer has no chat template. Received: chat_template=None"
            )
        return render_chat_template(
            self.chat_template,
            messages,
            add_generation_prompt,
            **self.template_tokens(),
        )

    def template_tokens(self):
        """The special tokens a chat template may use, by its names for them."""
        return {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "pad_token": self.pad_token,
        }
