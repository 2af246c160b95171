"""Freshness (spec §7 "Stale data"): does a directive seek a value as it stands now? Pure.

:func:`seeks_live_value` is the classifier. It fires on temporal deixis ("current", "right now",
"today", "latest", "live" in its current sense, ...) in a request that seeks a fact, and stays silent
when the deixis sits beside something local (the current directory, branch, file, parser), a time or
date (the tail already carries the clock), or the agent's own state ("what are you holding right
now"; "are you able to get ..." is a request, not the agent's state), and on requests to change
something ("refactor the current parser"). "live" counts only as an adjective ("the live score"),
never as the verb ("we live in the city").

Deixis counts only where the directive *uses* it about the world now. Three kinds of occurrence are
not uses, and a directive whose every occurrence is one of them does not fire:

* **quoted**: inside quotation marks (straight, curly, guillemets, corner brackets) or a code span or
  fence (``Translate "the current price" into French``, ``Grep the logs for `real-time```): quoted text
  is someone else's words, an error message, a pattern, not the request's own. The quoted spans are
  cut out before anything is matched, so deixis outside them still fires (``What is the current price
  of "Brent crude"?``); a directive that is nothing but one quotation is read from the inside.
* **mentioned, not used**: the word is talked about as a word. Always after ``the word/term/phrase``;
  before ``mean(s)``, ``spelled``, ``in a sentence``, ``is a/an adverb|noun|...``, ``one word or two``;
  and after ``spell``, ``define``, ``translate``, ``synonym/antonym/meaning/... of|for``, ``how do you
  say``, ``letters/syllables in``, ``difference between``, ``which is correct:`` when the word stands
  alone there (punctuation, the end or a function word follows: "the meaning of today's rally" and
  "translate the latest headlines" still use it). A word coordinated with a mentioned one ("up to date
  or up-to-date") is mentioned too, and so is a gloss in parentheses ("aujourd'hui (today)").
* **about the conversation itself**: the clause talks about what its speakers said or asked
  ("What did I just say?", "Summarize what we discussed today", "the latest thing I asked you"), names
  the conversation ("our conversation", "this chat", "my last question"), or the deixis modifies one of
  its parts ("the current topic", "today's chat"). "I asked you for the current price" is still a
  request for the price, and a leading "as I said," is only a parenthesis.

The decision reads the directive alone: no tool names. What satisfies a firing directive is a successful
call of any tool that did not declare ``observes=False`` (``ToolDecl.observes``: True, or None for a tool
that declared nothing, such as a client's tool under ``vak serve``), judged by the turn rules.

:func:`accepts_no_live_data` reads an answer that says plainly it has no live data (accepted as an
answer). :func:`last_figure` and :func:`fail_closed_statement` write the system-authored statement a
turn fails closed with: no current value was retrieved; the last figure the conversation recorded, and
when — never a carried-over figure presented as current.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

_DEIXIS = re.compile(
    r"\b(?:current(?:ly)?|right now|as of now|at the moment|just now|today(?:'s)?|tonight(?:'s)?|latest|"
    r"up[- ]to[- ]date|real[- ]time|this (?:morning|afternoon|evening|week)(?:'s)?)\b"
    r"|\bnow\b(?=\s*[?.!]?\s*$)"  # "now" closing the request ("what is it trading at now?")
    r"|\b(?:the|a|any|some|get|show|fetch|check|with)\s+live\b"  # "the live score": the adjective
    r"|\blive\s+(?:score|scores|price|prices|data|feed|results?|updates?|rates?|values?|stats|odds|"
    r"standings|traffic|conditions|coverage|numbers?|count|quotes?)\b"
)
# Deixis beside these is local or about time, not the world's current state.
_LOCAL = re.compile(
    r"\b(?:current(?:ly)?|latest|today's|now)\s+(?:working\s+)?(?:directory|dir|folder|branch|file|files|repo|"
    r"repository|project|parser|function|class|module|code|tests?|commit|line|buffer|session|conversation|"
    r"context|selection|cursor|step|task|plan|implementation|config|configuration|setup|window|tab|page|"
    r"diff|version of (?:the|this|our) (?:code|file|parser|module)|turn|prompt|model|path|workspace|"
    r"checkout|build|migration|schema|draft|document)\b"
)
_TIME = re.compile(
    r"(?<!-)(?<!to )(?<!real )\b(?:time|date|day|year|month|hour|timezone|time zone|clock|weekday)\b"
    r"|\bwhat\s+(?:time|day|date)\b"
)
# The agent's own state; "are you able to get ..." is a request, not a question about the agent.
_AGENT = re.compile(r"\byour\b|\b(?:are|were)\s+you\b(?!\s+(?:able|allowed|going)\s+to\b)"
                    r"|\byou(?:'re|\s+are)\b(?!\s+(?:able|allowed)\s+to\b)")
_CHANGE = re.compile(
    r"^\s*(?:please\s+)?(?:refactor|rename|fix|write|implement|delete|remove|add|change|update|move|create|"
    r"commit|format|rewrite|run|build|install|open|save|edit|clean|revert|merge|rebase|push|deploy|"
    r"test|document|simplify|optimi[sz]e)\b"
)

# ---------------------------------------------------------------- quoted: cut out before matching

# Every opening and closing quotation mark becomes a straight one, so one pattern pairs them; a curly
# apostrophe ("what’s") becomes a plain one and stays an apostrophe.
_MARKS = str.maketrans({**dict.fromkeys("“”„‟«»「」『』＂", '"'), **dict.fromkeys("‘’‚‛‹›", "'")})
_HOLE = "\ue000"  # what a cut-out span leaves: not a word character, so no pattern reads it as a word
_QUOTED = re.compile(
    r"```.*?```|`[^`]*`"  # a fence, a code span
    r'|"[^"]*"'
    # A single-quoted span: the opening mark not after a letter (an apostrophe is), the closing one not
    # before a letter ("today's" inside the span is an apostrophe, not the end).
    r"|(?<![\w'])'(?=\S)(?:[^']|(?<=\w)'(?=\w))*?(?<=\S)'(?!\w)",
    re.DOTALL,
)
_LETTER = re.compile(r"[^\W\d_]")


def _unquoted(text: str) -> str:
    """``text`` with its quoted spans and code spans cut out; a text that is one quotation and nothing
    else (a pasted question in quotes) is read from the inside, once."""
    bare = _QUOTED.sub(f" {_HOLE} ", text)
    if bare != text and not _LETTER.search(bare):
        inner = " ".join(m.group(0).strip("`\"'") for m in _QUOTED.finditer(text))
        bare = _QUOTED.sub(f" {_HOLE} ", inner)
    return " ".join(bare.split())


# ---------------------------------------------------------------- mentioned: the word as a word

# "the word X" names X as a word whatever follows ("what's the word on ..." is slang for news).
_NAMED_WORD = re.compile(
    r"(?<!what's the )(?<!what is the )\b(?:word|words|term|terms|phrase|phrases|expression|expressions|"
    r"adverb|adjective|noun|keyword)(?:\s*[:,])?\s+$"
)
# What comes right before a mentioned word ("a synonym for ", "spell "), which must then stand alone.
_MENTION_BEFORE = re.compile(
    r"(?:\b(?:synonyms?|antonyms?|opposites?|definitions?|meanings?|etymology|origins?|pronunciations?|"
    r"spellings?|translations?|plurals?|abbreviations?|conjugations?|usage|rhymes?|words?|equivalents?|"
    r"roots?|stems?|suffix|prefix|forms?|comparative|superlative|past tense|senses?)\s+(?:for|of|to|with)"
    r"|\b(?:define|defining|spell|spelling|pronounce|pronouncing|translate|translating|hyphenate|"
    r"hyphenating|capitali[sz]e|abbreviate|conjugate|rhymes?\s+with)"
    # "say/write/use X" only as the speaker's own act ("Say tonight in Hindi", "should I write up to
    # date"): "what did the Fed say today?" asks for news.
    r"|(?:^|\b(?:i|we|you|one|to|please|should|must)\s+)(?:say|write|type|use)"
    r"|\b(?:sentences?|examples?)\s+(?:\w+\s+)?(?:using|with|containing|including|that uses|that contains)"
    r"|\b(?:comma|hyphen|dash|apostrophe|capital letter|full stop|period)\s+(?:after|before|in)"
    r"|\bwhich\s+is\s+(?:correct|right|better|preferred|proper)\s*[:,]?|\b(?:that|which)\s+means?"
    r"|\b(?:how\s+(?:do|does|did|would|can|could|should)\s+(?:you|i|we|one|people|they)|"
    r"(?:way|ways|how)\s+to)\s+(?:say|write|spell|pronounce|type|use|abbreviate|translate|express)"
    r"|\b(?:letters?|syllables?|characters?|vowels?|consonants?)(?:\s+\w+){0,3}?\s+(?:in|of|does|do|has)"
    r"|\bpart\s+of\s+speech\s+(?:is|of)|\b(?:kind|type|sort|class)\s+of\s+word\s+is"
    r"|\bdifference\s+between)\s+$"
)
# The mentioned word stands alone: the end, punctuation, or a function word follows it, never a noun it
# modifies ("the meaning of today's rally" uses "today's").
_ALONE = re.compile(
    r"\s*(?:$|[^\w\s]|(?:in|into|to|and|or|vs|versus|is|as|has|have|mean|means|meant|backwards?|"
    r"correctly|properly|before|after|here|there|for|with|without|from|when|if|contain|contains)\b)"
)
_FRAME_CHARS = 120  # longer than any frame before a mentioned word
_COORDINATED = re.compile(r"\s*(?:,|/|or|and|vs\.?|versus|nor)\s*")  # a second word beside a mentioned one
_GLOSS_OPEN = re.compile(r"\(\s*(?:=\s*)?$")
_GLOSS_CLOSE = re.compile(r"\s*\)")
_WORD_CLASS = (r"(?:adverb|adjective|noun|verb|pronoun|preposition|conjunction|determiner|interjection|word|"
               r"term|phrase|expression|synonym|antonym|homophone|superlative|comparative|compound|"
               r"part of speech)s?\b")
# What comes right after a mentioned word ("... mean?", "... is an adverb", "... in a sentence").
_MENTION_AFTER = re.compile(
    r"\s*[:,]?\s*(?:"
    rf"(?:(?:is|as|was|being)\s+(?:it\s+)?(?:an?\s+|the\s+)?|an?\s+)(?:\w+\s+)?{_WORD_CLASS}"
    rf"|the\s+{_WORD_CLASS}"  # "is latest the superlative of late?" (not "currently the hottest term")
    r"|(?:mean|means|meant|signify|signifies|stands? for|refers? to|implies|imply)\b(?!\s+for\b)"
    r"|(?:(?:is|are)\s+)?(?:spelled|spelt|pronounced|hyphenated|capitali[sz]ed|abbreviated|conjugated|"
    r"translated)\b"
    r"|(?:is\s+)?(?:one|two|a single|a compound|separate)\s+words?\b"
    r"|(?:or\s+\w+\s+)?(?:(?:more|less|too|very)\s+)?(?:formal|informal|colloquial|polite|archaic|overused|"
    r"redundant|grammatical)\b"
    r"|(?:take|takes|need|needs|require|requires)\s+(?:an?\s+|the\s+)?(?:article|comma|hyphen|capital|"
    r"apostrophe|preposition)s?\b"
    r"|in\s+a\s+sentence\b|backwards\b|at\s+the\s+(?:start|beginning|end)\s+of\s+(?:a|the)\s+sentence\b"
    r"|(?:start|starts|begin|begins|end|ends|open|opens|go|goes|come|comes|appear|appears|be placed|be used)"
    r"\s+(?:in\s+|at\s+)?(?:the\s+(?:start|beginning|end)\s+of\s+)?(?:a|the)\s+sentence\b)"
)


def _mentioned(text: str, start: int, end: int) -> bool:
    """Whether the deixis at ``text[start:end]`` is talked about as a word."""
    # Every frame is a few words long: reading only the text just before keeps a long directive linear.
    before = text[max(0, start - _FRAME_CHARS):start]
    if _MENTION_AFTER.match(text, end) or _NAMED_WORD.search(before):
        return True
    if _GLOSS_OPEN.search(before) and _GLOSS_CLOSE.match(text, end):  # a gloss: "aujourd'hui (today)"
        return True
    # A "live" match already holds the noun it modifies ("live data"), so it never stands alone.
    alone = _ALONE.match(text, end) and "live" not in text[start:end]
    return bool(alone and _MENTION_BEFORE.search(before))


# ---------------------------------------------------------------- about the conversation itself

# Its speakers saying, asking, discussing: "we discussed", "I asked you" (not "I asked you for ...": a
# request for the thing asked for), "did you say", "what are we talking about".
_SAID = (r"said|asked|discussed|talked|mentioned|told|wrote|typed|sent|covered|chatted|agreed|decided|"
         r"spoke|went over|brought up|raised|answered|replied|suggested|explained|described|meant|noted|"
         r"settled on|landed on|touched on|exchanged|quoted|gave|showed|listed|shared|recommended")
_SPEAKERS = re.compile(
    rf"\b(?:i|we|you)(?:'ve|'d)?\s+(?:(?:just|already|have|had|previously|earlier|first|last|recently|all|both|"
    rf"not)\s+){{0,2}}(?:{_SAID})\b(?!\s+(?:you\s+|me\s+)?(?:for|to)\b)"
    r"|\b(?:did|do|does|have|had|was|were|am|are)(?:n't)?\s+(?:i|we|you)\s+(?:(?:just|already|not|ever|"
    r"last|first|really|been)\s+){0,2}(?:say|said|saying|ask|asked|asking|discuss|discussed|discussing|talk|"
    r"talked|talking|mention|mentioned|mentioning|tell|told|telling|write|wrote|writing|type|typed|send|"
    r"sent|cover|covered|decide|decided|agree|agreed|answer|answered|reply|replied|suggest|suggested|"
    r"explain|explained|chat|chatting|go over|went over|mean|meant|working on|settle|settled|land|landed|pick|"
    r"picked|choose|chose|exchange|exchanged|quote|quoted|give|gave)\b"  # not "are we on (track)"
    r"|\b(?:i|we|you)(?:'re|'m|\s+are|\s+am|\s+were|\s+was)\s+(?:(?:just|still|now)\s+)?(?:saying|asking|"
    r"discussing|talking|chatting|working on|covering)\b"
    r"|\bwhere\s+(?:were|are)\s+we\b"  # "where were we just now?"
)
# "the latest decision we made", "the current question we're on": a relative clause of the speakers
# right after the deixis and its noun.
_SPEAKERS_AFTER = re.compile(
    rf"\s+(?:\w+\s+){{1,2}}(?:that\s+|which\s+)?(?:i|we|you)(?:'re|'ve|'d)?\s+(?:(?:just|have|had|were|"
    rf"are)\s+){{0,2}}(?:{_SAID}|made|reached|picked|chose|working on|on|settled|discussing|talking)\b"
)
# The conversation named: "our conversation", "this chat", "the discussion so far", "my last question".
_DIALOGUE = re.compile(
    r"\b(?:our|this)\s+(?:\w+\s+)?(?:conversation|chat|discussion|dialogue|dialog|exchange|thread)\b"
    r"|\bthe\s+(?:conversation|chat|discussion|dialogue|dialog)\s+(?:so far|above|here|we|i|you)\b"
    r"|\bmy\s+(?:\w+\s+){0,3}(?:questions?|messages?|prompts?|replies|reply|answers?)\b"  # not "my visa request"
    r"|\b(?:topic|subject|question|point)s?\s+(?:(?:are|were|am|was|have|had|did|do)\s+)?(?:that\s+)?"
    r"(?:i|we|you)\b"  # "the topic we were on", "which topic are we on"
)
# A part of the conversation right after the deixis ("the current topic", "today's chat"), standing as
# the noun of its phrase: not the head of a compound ("the latest exchange rate") and not sent out into
# the world by a preposition ("the latest message from the central bank", "the current topic in AI").
_DIALOGUE_NOUN = re.compile(
    r"\s+(?:topic|question|answer|reply|response|message|chat|discussion|thread|request|subject|point|"
    r"instruction|exchange)s?(?=\s*(?:$|[^\w\s]|(?:that|which|i|we|you|is|was|again|so far|please)\b"
    r"|(?:of|in|from)\s+(?:our|this|the)\s+(?:conversation|chat|discussion)\b))"
)
_ASIDE = re.compile(r"\bas\s+(?:i|we|you)\s+(?:just\s+|already\s+)?(?:said|mentioned|discussed|noted|asked|"
                    r"agreed|explained|told you|told me)(?:\s+(?:earlier|before|above|yesterday|previously))?\s*[,;:]?")
_SENTENCES = re.compile(r"[^.;!?]+(?:[.;!?]+|$)")
_CLAUSE_BREAK = re.compile(r",\s*(?=(?:what|who|whom|which|how|where|when|is|are|can|could|please|tell|"
                           r"give|show|and what|so what)\b)")
_LEAD_WORDS = 4  # "so far today", "right now": a lead-in, not a clause of its own
# "the latest thing on our list we discussed": "our" in a short gap with no comma.
_OURS = re.compile(r"^[^,]*\bour\b[^,]*$")
_OURS_WORDS = 6
_PREPOSITION = re.compile(r"\b(?:of|for|in|on|at|about|from|to)\b")


def _about_conversation(clause: str, start: int, end: int, speakers: Sequence[re.Match[str]]) -> bool:
    """Whether the deixis at ``clause[start:end]`` is about the conversation; ``speakers`` are the
    clause's :data:`_SPEAKERS` matches, in order (the sentence naming the conversation is checked by the
    caller)."""
    if _DIALOGUE_NOUN.match(clause, end) or _SPEAKERS_AFTER.match(clause, end):
        return True
    if speakers and speakers[0].end() <= start:  # "what we discussed today", "what did you tell me just now"
        return True
    after = next((m for m in speakers if m.start() >= end), None)
    if after is None:
        return False
    gap = clause[end:after.start()]  # "the latest thing I asked": a noun or two, no preposition
    words = len(gap.split())
    return (words <= 2 and not _PREPOSITION.search(gap)) or (words <= _OURS_WORDS and bool(_OURS.search(gap)))


def _clauses(sentence: str) -> list[str]:
    """``sentence`` split before a new question after a comma ("You mentioned Apple, how is it trading
    now?"); a short lead-in with no speaker stays with what follows ("So far today, what have I asked?")."""
    out: list[str] = []
    lead = ""
    for piece in _CLAUSE_BREAK.split(sentence):
        piece = f"{lead}, {piece.strip()}" if lead else piece.strip()
        lead = ""
        if len(piece.split()) <= _LEAD_WORDS and not _SPEAKERS.search(piece):
            lead = piece
            continue
        out.append(piece)
    if lead:
        out.append(lead)
    return out


def _used(text: str) -> bool:
    """Whether some deixis in ``text`` (lowercased, quotes cut out) is used, not mentioned, and about
    the world rather than the conversation."""
    for sentence in _SENTENCES.findall(_ASIDE.sub(" ", text)):
        if _DIALOGUE.search(sentence):  # the sentence names the conversation: its deixis is about it
            continue
        for clause in _clauses(sentence):
            speakers = list(_SPEAKERS.finditer(clause))
            mentioned_until = -1  # where the last mentioned word ended: "write up to date or up-to-date"
            for m in _DEIXIS.finditer(clause):
                if _mentioned(clause, m.start(), m.end()) or (
                        mentioned_until >= 0 and _COORDINATED.fullmatch(clause, mentioned_until, m.start())):
                    mentioned_until = m.end()
                elif not _about_conversation(clause, m.start(), m.end(), speakers):
                    return True
    return False


def seeks_live_value(directive: str) -> bool:
    """Whether ``directive`` asks for a value as it stands now (the live-data domain)."""
    text = _unquoted(directive.translate(_MARKS).lower())
    if not _used(text):
        return False
    if _LOCAL.search(text) or _TIME.search(text) or _AGENT.search(text) or _CHANGE.search(text):
        return False
    return True


_NO_LIVE = re.compile(
    r"\bno (?:live|current|real[- ]time|up[- ]to[- ]date) (?:data|value|figure|information|access|source)\b"
    r"|\b(?:do not|don't|cannot|can't|could not|couldn't|am unable to|was unable to|unable to)\s+"
    r"(?:have\s+|access\s+|retrieve\s+|get\s+|fetch\s+|check\s+|provide\s+)(?:access to\s+)?(?:any\s+)?"
    r"(?:the\s+)?(?:live|current|real[- ]time|up[- ]to[- ]date)\b"
    r"|\bno current value was retrieved\b"
)


def accepts_no_live_data(answer: str) -> bool:
    """Whether ``answer`` says plainly that it has no live data (an honest answer, accepted)."""
    return bool(_NO_LIVE.search(" ".join(answer.lower().split())))


@dataclass(frozen=True)
class RecordedFigure:
    """A figure an earlier turn recorded: its words, the turn and when the turn closed."""

    text: str
    turn: int
    at: float  # unix seconds


_NUMBER = re.compile(r"\d")
_SENTENCE = re.compile(r"[^.!?\n]*\d[^.!?\n]*(?:[.!?]|$)")


def figure_of(narration: str, cards: Sequence[dict[str, object]]) -> str:
    """The figure a turn recorded: a card's label, value and unit, else the first sentence of its
    answer that holds a number; "" when it recorded none."""
    for payload in cards:
        value = payload.get("value")
        if value is not None and _NUMBER.search(str(value)):
            label = str(payload.get("label") or payload.get("title") or "").strip()
            unit = str(payload.get("unit") or "").strip()
            return " ".join(p for p in (f"{label}:" if label else "", str(value), unit) if p)
    m = _SENTENCE.search(narration)
    return m.group(0).strip() if m else ""


def last_figure(figures: Sequence[RecordedFigure]) -> RecordedFigure | None:
    """The most recent recorded figure (``figures`` in turn order)."""
    return next((f for f in reversed(figures) if f.text), None)


def fail_closed_statement(last: RecordedFigure | None, ran: Sequence[str] = ()) -> str:
    """The system-authored answer of a turn that asked for a current value and observed nothing. ``ran``:
    the tools that did succeed this turn (each declared not to read current values): named, so the
    statement never says that nothing was observed after a successful call."""
    if ran:
        head = (f"No current value was retrieved: the tools that succeeded in this turn ({', '.join(ran)}) are "
                "declared as not reading the world as it is now, so no figure here is known to be current.")
    else:
        head = ("No current value was retrieved: no tool that reads the world as it is now succeeded in this "
                "turn, so no figure here is current.")
    if last is None:
        return head + " The conversation has recorded no earlier figure for it."
    when = datetime.fromtimestamp(last.at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{head} The last figure the conversation recorded was \"{last.text}\" (turn {last.turn}, "
            f"{when}); it may no longer hold.")
