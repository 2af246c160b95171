"""A request's messages as they are added, consecutive messages of one role merged (``Merged``): what
``vak_context.context.request.assemble.project`` builds a request's history with. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from vak_context.context.request.messages import Message
from vak_context.events.blocks import MessageBlock, ToolResultBlock


class Merged:
    """A request's messages as they are added: consecutive messages of one role merge (providers want roles
    to alternate), tool results leading in a user message. Each merged message is built once, at ``build``:
    merging as they come rebuilt the growing message at every card (quadratic in the cards shown)."""

    def __init__(self) -> None:
        self._done: tuple[Message, ...] = ()  # messages built already, before the ones below (``resume``)
        self._roles: list[Literal["user", "assistant"]] = []
        self._parts: list[list[MessageBlock]] = []
        self._whole: list[Message | None] = []  # the message as added, while nothing merged into it

    def snapshot(self) -> Snapshot:
        """The messages so far, built: all but the last, and the last with what it is made of (a message
        added later may merge into it)."""
        built = self.build()
        if not built:
            return (), None
        return built[:-1], (self._roles[-1], tuple(self._parts[-1]), built[-1])

    @classmethod
    def resume(cls, snapshot: Snapshot) -> Merged:
        """A ``Merged`` holding ``snapshot``'s messages (the same objects, while nothing merges into the last)."""
        merged = cls()
        merged._done, last = snapshot
        if last is not None:
            role, parts, whole = last
            merged._roles.append(role)
            merged._parts.append(list(parts))
            merged._whole.append(whole)
        return merged

    def extend(self, more: Iterable[Message]) -> None:
        for m in more:
            self.add(m)

    def user(self, content: tuple[MessageBlock, ...]) -> None:
        self._add("user", content, None)

    def add(self, msg: Message) -> None:
        self._add(msg.role, msg.content, msg)

    def _add(self, role: Literal["user", "assistant"], content: tuple[MessageBlock, ...], msg: Message | None) -> None:
        if not self._roles or self._roles[-1] != role:
            self._roles.append(role)
            self._parts.append(list(content))
            self._whole.append(msg)
            return
        parts = self._parts[-1]
        self._whole[-1] = None
        results = [p for p in content if isinstance(p, ToolResultBlock)]
        if role == "user" and results:
            rest = [p for p in content if not isinstance(p, ToolResultBlock)]
            lead = [p for p in parts if isinstance(p, ToolResultBlock)]
            other = [p for p in parts if not isinstance(p, ToolResultBlock)]
            parts[:] = [*lead, *results, *other, *rest]
        else:
            parts.extend(content)

    def build(self) -> tuple[Message, ...]:
        # Every part is a block of a message or a block made here (validated once): a merged message of
        # hundreds of cards is not validated part by part again.
        return self._done + tuple(whole if whole is not None else Message.model_construct(role=role, content=tuple(parts))
                                  for role, parts, whole in zip(self._roles, self._parts, self._whole, strict=True))


# ``Merged.snapshot``: the built messages but the last, and the last as (role, parts, the built message).
Snapshot = tuple[tuple[Message, ...], tuple[Literal["user", "assistant"], tuple[MessageBlock, ...], Message] | None]
