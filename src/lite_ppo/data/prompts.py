"""Turn problem statements into model prompts: the chat template for instruct models, plain text for base models."""

from __future__ import annotations

from typing import Any, Literal

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
PLAIN_TEMPLATE = "Question: {problem}\n{instruction}\nAnswer:"


class PromptFormatter:
    """Formats and tokenizes prompts.

    Args:
        style: ``"chat"`` applies the tokenizer's chat template (with the generation prompt);
            ``"plain"`` uses ``"Question: {problem}\\n{instruction}\\nAnswer:"`` for base models;
            ``"auto"`` picks chat when the tokenizer has a ``chat_template``.
        instruction: appended after the problem (the user turn in chat style); ``""`` omits it.
        system_prompt: a system message in chat style; in plain style, a first paragraph.

    Example:
        >>> PromptFormatter(style="plain", instruction="Box it.").format("What is 2 + 3?", tokenizer=None)
        'Question: What is 2 + 3?\\nBox it.\\nAnswer:'
    """

    def __init__(
        self,
        style: Literal["auto", "chat", "plain"] = "auto",
        instruction: str = DEFAULT_INSTRUCTION,
        system_prompt: str | None = None,
    ) -> None:
        if style not in ("auto", "chat", "plain"):
            raise ValueError(f"style must be 'auto', 'chat' or 'plain', got {style!r}")
        self.style, self.instruction, self.system_prompt = style, instruction, system_prompt

    def resolved_style(self, tokenizer: Any) -> Literal["chat", "plain"]:
        """``"chat"`` or ``"plain"``, resolving ``"auto"`` from the tokenizer."""
        if self.style != "auto":
            return self.style
        return "chat" if getattr(tokenizer, "chat_template", None) else "plain"

    def format(self, problem_text: str, tokenizer: Any) -> str:
        """The prompt string for one problem statement."""
        if self.resolved_style(tokenizer) == "chat":
            if not getattr(tokenizer, "chat_template", None):
                raise ValueError("style='chat' but the tokenizer has no chat_template; use style='plain' or 'auto'")
            user = f"{problem_text}\n{self.instruction}" if self.instruction else problem_text
            messages = [{"role": "user", "content": user}]
            if self.system_prompt:
                messages.insert(0, {"role": "system", "content": self.system_prompt})
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        text = PLAIN_TEMPLATE.format(problem=problem_text, instruction=self.instruction)
        if not self.instruction:
            text = text.replace("\n\n", "\n")
        return f"{self.system_prompt}\n\n{text}" if self.system_prompt else text

    def encode(self, problem_texts: list[str], tokenizer: Any) -> list[list[int]]:
        """Token ids of each formatted prompt.

        A chat template already writes the special tokens (BOS, role markers), so chat prompts are
        encoded with ``add_special_tokens=False``; plain prompts let the tokenizer add its usual
        ones (e.g. BOS for Llama-style base models).
        """
        add_special = self.resolved_style(tokenizer) == "plain"
        texts = [self.format(text, tokenizer) for text in problem_texts]
        return [list(ids) for ids in tokenizer(texts, add_special_tokens=add_special)["input_ids"]]
