"""Held-out directives for the freshness classifier (spec §7 "Stale data"): deixis that is quoted,
mentioned as a word, or about the conversation itself does not fire; real requests for a value as it
stands now still do, including ones with quotes, word-talk or the conversation around their deixis.

Each table varies the deixis word ("current", "latest", "today", "right now", "up-to-date",
"real-time", "as of now", "live", a closing "now"), its position, punctuation, quote styles (" " ' ' “ ” ‘ ’ « » „ “ 「 」 and code spans), case and
phrasing in other languages.
"""

from __future__ import annotations

import time

import pytest

from vak_context.context.request.messages import ToolSpec
from vak_context.context.request.surface import Surface, ToolDecl
from vak_context.context.rules import drift
from vak_context.context.rules.freshness import seeks_live_value

# The deixis sits inside quotation marks or a code span: someone else's words, a message, a pattern.
QUOTED = [
    'Translate "the current price" into French',
    "What does the error message 'latest version not found' mean?",
    'Grep the logs for `real-time`',
    "Translate “today's weather” into Spanish",
    'What is the tone of ‘up-to-date’ in this contract?',
    'Search the codebase for "right now"',
    'The banner says "Live scores unavailable" — what could cause that?',
    "Why does the script print 'current: None'?",
    'In the sentence "I am currently at home", which word is the verb?',
    'Is "Latest news from Paris" a good headline for a travel blog?',
    'Count the vowels in `today`',
    'What does `git log --since=today` print?',
    'Que veut dire « right now » en anglais ?',
    '¿Cómo se traduce "latest news" al español?',
    "Wie übersetzt man 'up to date' ins Deutsche?",
    'My test fails with `AssertionError: expected current price > 0`; why?',
    "A tweet said 'the live feed is down right now' -- is that sarcasm?",
    '```\nprint("latest")\n``` what does this code print?',
    "Put the label 'Today's specials' in bold",
    'Which tense is „I am reading right now“?',
    'The ticket title is 「latest build broken」, who filed it?',
    'Explain the phrase `as of now` in this changelog',
    "What's the French for 'right now'?",
    'Is the sentence "prices are rising today" in the passive voice?',
    'My app logs `fetching latest config` forever; what does that mean?',
    'The docs say “real-time sync is enabled” — is that accurate for v2?',
    "Why would a compiler warn 'current scope shadows variable'?",
    'Translate "live coverage" into Italian',
    "What is the grammatical mood of 'I am leaving now'?",
    'Find the typo in “Todays specials are up to date”',
    'Explain the lyric "tonight tonight" from the song',
    "What's wrong with the SQL `SELECT * FROM prices WHERE day = today`?",
    'Comment traduire « currently » en français ?',
    'Was bedeutet „latest“ auf Deutsch?',
    "Rewrite this more politely: 'send me the latest report now'",
    "Is 'as of now' redundant in legal writing?",
    'Write a haiku that uses the phrase "this morning"',
    "The error 'up-to-date check failed' appears on boot; where should I look?",
    "Translate 'the latest updates are live' into Portuguese",
    'Is “currently” spelled with one r or two?',
    "What is the past tense in 'I am running late today'?",
    'Search the repo for `now()` calls',
    'What does the HTTP header `X-Live-Data` do?',
    'In Python, what does `datetime.now()` return?',
    'Paraphrase: "the current situation is stable"',
    "Is 'latest and greatest' a cliché?",
    'How should I punctuate "right now I\'m busy"?',
    "Which language is 'aujourd'hui' (today)?",
    'Our style guide bans the word “currently”; why?',
    "Grep for 'real time' in src",
    "Why does Slack show 'You are currently offline'?",
    'Proofread: “The latest figures, released today, show growth.”',
    "What's the origin of the idiom 'live and let live'?",
    'Is `--latest` a valid npm flag?',
    'Who sang "Tonight, Tonight"?',
    'Explain what "real-time operating system" means',
    "Format 'up-to-date' in small caps",
    'Turn “as of now” into a more formal phrase',
    'Translate the menu item ‘today’s soup’',
    'Is the regex /now$/ correct? I wrote `\\bnow$`',
    "Describe the painting titled 'Paris Today'",
    "WHAT DOES 'CURRENTLY UNAVAILABLE' MEAN ON AMAZON?",
    'my friend texted “im busy rn, talk tonight” what does rn stand for',
    'Is the title `Latest Posts` or `Recent Posts` better for a blog sidebar?',
    "How would you punctuate: 'Today, I went home'?",
    'The label reads "Updated in real-time". Is that grammatical?',
    'Explain ‘as of now’ vs ‘as of today’ in contracts.',
    'Find all occurrences of "current_user" and \'now()\' in the code',
    "In the poem, why does the speaker repeat 'tonight'?",
    "What font is used in the 'Live Now' badge?",
    'Classify the sentiment of: "The latest update broke everything!"',
    "Summarize this review: 'The live show today was amazing'",
    "Extract the date from 'Posted today at 9am'",
]

# The deixis is talked about as a word (use and mention).
MENTIONED = [
    'How do you spell "currently"?',
    "Is 'today' an adverb or a noun?",
    'What is a synonym for latest?',
    'Define the word current',
    'How many letters are in the word now',
    "What's an antonym of currently?",
    'Is today a noun or an adverb here?',
    'How do you pronounce real-time?',
    'What is the etymology of the word latest?',
    'Give me another word for right now',
    'What does up-to-date mean?',
    'Use currently in a sentence',
    'Should I hyphenate up to date before a noun?',
    'What rhymes with now?',
    'Translate today into German',
    'How do you say right now in Japanese?',
    'Is latest a superlative adjective?',
    "What's the difference between currently and presently?",
    'How many syllables does currently have?',
    'What part of speech is today?',
    'Spell tonight backwards',
    "What's the Spanish word for today?",
    'Capitalize real-time in the title',
    'Is the term up-to-date hyphenated?',
    'currently: is it an adverb?',
    "What's another way to say currently?",
    'Is now an adverb?',
    'How do you spell latest in French?',
    "What's the opposite of current?",
    'Give me three synonyms of latest',
    'What is the definition of real-time?',
    'How many vowels are in today?',
    'Which syllable is stressed in currently?',
    'Is up-to-date hyphenated when it comes after the noun?',
    'What language does the word today come from?',
    'Is tonight one word or two?',
    "What's the meaning of currently?",
    'Can you use right now in a sentence?',
    'How do I pronounce latest?',
    'What does live mean when it rhymes with give?',
    'How is currently spelled?',
    'Is there a comma after currently at the start of a sentence?',
    'Should I write up to date or up-to-date?',
    'Give an example sentence using latest',
    'Translate currently to Spanish',
    "What's the Japanese word for right now?",
    'Is latest the superlative of late?',
    "What's the root of currently?",
    'How many letters does today have?',
    'Is current a noun?',
    'Which is correct: real-time or realtime?',
    'What does at the moment mean in British English?',
    'Spell current',
    "Is 'currently' overused in business writing?",
    "What's a more formal word for now?",
    'Is currently or presently more formal?',
    'How do you abbreviate real-time?',
    'Conjugate live in Spanish',
    'Does today take an article in German?',
    'Give me a word that means latest',
    "What's the plural of today?",
    'Write up-to-date in German',
    'What is the comparative form of latest?',
    'Can currently start a sentence?',
    'Say tonight in Hindi',
    "what's a fancier word for currently",
    "Is 'latest' comparative or superlative?",
    'TRANSLATE TONIGHT INTO FRENCH',
    'How do you write today in Korean?',
    "What's the German translation of right now?",
    'Synonyms for up-to-date, please',
    'What is the antonym of latest?',
    "Is now a conjunction in 'now that you are here'?",
    'In English grammar, is currently an adverb of time?',
    'Does the word latest have a comparative?',
    'Spell real-time without the hyphen',
    'What letters does tonight contain?',
]

# The deixis is about the conversation itself, not the world.
ABOUT_THE_CONVERSATION = [
    'What did I just say?',
    'Summarize what we discussed today',
    'What was the latest thing I asked you?',
    'Repeat your current answer',
    'What is the current topic of our conversation?',
    'What did you tell me just now?',
    'What have we talked about so far today?',
    'Recap this chat up to now',
    'What was my latest question?',
    'Remind me what you said earlier today',
    'What are we talking about right now?',
    'Quote the latest message I sent you',
    'In this conversation, what is the latest decision we made?',
    'Go back to the topic we were on just now',
    'Ignore the weather; what was the latest thing we agreed on?',
    "Summarise today's chat",
    'Show me my latest message',
    'What was I saying just now?',
    "What's the current question we're working on?",
    'List everything I asked you today',
    'What did we decide at the moment we started?',
    'Which of my questions today did you not answer?',
    'What did you just tell me?',
    'What have I asked you so far today?',
    'Can you summarise our conversation up to now?',
    'What was the latest thing you said?',
    'Tell me again what you told me a minute ago, right now',
    'What were we discussing just now?',
    "What did I ask at the start of today's session?",
    'Recap the discussion so far, latest points first',
    'Repeat the latest answer you gave me',
    "What's the current subject of this thread?",
    'What was my most recent question today?',
    'What did we agree on this morning?',
    'What did you mean by that just now?',
    'Which topic are we on right now?',
    'Go over what I said today again',
    "Summarize everything we've covered in this chat today",
    'What was the last thing I told you today?',
    'Did I already ask you this today?',
    "What's the latest point you made?",
    'Summarize our chat so far',
    'Read back my latest message',
    'What did we talk about at the moment you crashed?',
    'What have you told me today?',
    'Remind me what the current question was',
    'What did I mention just now about the budget?',
    'Scroll back: what was your answer just now?',
    'What were the latest instructions I gave you?',
    'How long have we been chatting today?',
    'What question did I ask you just now?',
    'Could you repeat what you said right now?',
    'Summarise the last five messages we exchanged today',
    'What were the latest figures you quoted me?',
    "What's the latest thing on our to-do list we discussed?",
    'Remind me of the current plan we agreed on',
    'Did you answer my question from this morning?',
    'List the topics we covered today',
    "What's today's topic?",
    'Before we continue, what did I say just now?',
    'Wait, what did you just say right now about the cache?',
    'What did we settle on at the moment we paused?',
    'sorry, what did you just say?',
    "Can you recap what we've talked about today?",
    'Whats the latest thing we decided?',
    'So far today, what have I asked you to do?',
    'What was your most recent answer?',
    'Which question was I asking just now?',
    'Please repeat the current question.',
    'Give me a summary of our discussion up to now',
    'What did I tell you my name was earlier today?',
    "What's the latest message in this thread?",
    'Where were we just now?',
    'OK. What did we agree on today? Keep it short.',
]

# Requests for a value as it stands now: these fire, whatever quotes, word-talk or conversation sits
# around their deixis.
LIVE = [
    'What is Apple trading at now?',
    'Who is the current CEO of Microsoft?',
    'What is the latest release of Python?',
    "What's the weather like in Tokyo right now?",
    'What is the USD to JPY exchange rate today?',
    "What's the latest news from Ukraine?",
    'What is the current score in the Lakers game?',
    'What is the price of gold right now?',
    'Current Bitcoin price?',
    'Who is currently the prime minister of the UK?',
    "What is Tesla's stock price today?",
    'How much is the euro worth in dollars right now?',
    'Is it raining in London right now?',
    "What's the current interest rate set by the Fed?",
    'What is the latest version of Node.js?',
    "What are today's top headlines?",
    'Who is leading the Masters right now?',
    "What's the live score in the Arsenal game?",
    "What's the current gas price in California?",
    'What is the current price of "Brent crude"?',
    '"What is the current price of gold?"',
    "What's the latest news on the film 'Dune'?",
    'How is ‘NVDA’ trading right now?',
    'As I mentioned, I need the latest exchange rate for the yen',
    'I asked you for the current weather in Oslo',
    "What's the meaning of today's market rally?",
    'Spell out the current exchange rate for the euro',
    'You said it was 20 degrees; what is the temperature in Rome right now?',
    'Can you check the current price of copper?',
    'Are you able to get the latest EUR/USD rate?',
    "What's the current exchange rate between the pound and the euro?",
    'Who is the current president of France?',
    "How's the weather in Berlin today?",
    "What's the latest on the Boeing strike?",
    'Current price of Ethereum',
    'Is Heathrow airport open right now?',
    "What are today's mortgage rates?",
    "What's the score in the Yankees game right now?",
    'Give me the latest Premier League standings',
    'What is the current unemployment rate in the US?',
    'How much does an ounce of silver cost today?',
    "What's trending on Twitter right now?",
    "Who's currently top of the ATP rankings?",
    "What's the latest version of Rust?",
    'Show me the live traffic on the M25',
    'What is the S&P 500 at now?',
    'Any news today about the Fed?',
    'What are the current COVID guidelines in Germany?',
    'How is the yen doing against the dollar this week?',
    'What is the current word count limit for tweets?',
    "What's the latest word from the White House on tariffs?",
    "What's the current price of the stock you mentioned?",
    'Is the current CEO of Twitter still Linda Yaccarino?',
    'what is bitcoin at right now',
    'How much is gas today in Ohio?',
    'What are the latest developments in the Gaza ceasefire talks?',
    'Current weather in Lagos?',
    'Latest score Real Madrid vs Barcelona',
    'How many people are on the ISS right now?',
    'Who is the latest Nobel laureate in physics?',
    'What is the latest message from the central bank?',
    "What's the current topic in AI research everyone is talking about?",
    'Translate the latest headlines from Le Monde into English',
    "Tell me today's top story",
    'What did the Fed decide today?',
    'What did the markets do today?',
    'Find me the current definition of a recession used by the NBER',
    'Which airlines are flying to Kyiv right now?',
    "What's the current record for the 100m sprint?",
    'Is Twitter down right now?',
    "What's the latest iOS version?",
    'What are the current opening hours of the Louvre?',
    'Can you tell me the current price of oil?',
    'Could you say what the euro is worth today?',
    'Please look up the latest GDP figures for Brazil',
    'Which is cheaper right now: gold or silver?',
    "What's the difference between the current price of gold and silver?",
    'Are flights to Bali running today?',
    'How many COVID cases were reported today in Japan?',
    'Who is playing at Wembley tonight?',
    "Use the latest data to tell me Germany's inflation rate",
    "Type today's EUR/USD rate into the answer",
    "What's the word today on the merger talks?",
    'How much is one dollar in rupees today?',
    'Show me live results for the Iowa caucus',
    "What's the current state of the housing market in Toronto?",
    "What is Nvidia's market cap right now, and what was it in January?",
    'Translate the current weather report for Madrid into English',
    "What's the meaning of the latest Fed statement for bond yields?",
    'Define the current price of Brent crude for me',
    "Spell out today's forecast for Chicago",
    'Say the latest score of the Celtics game',
    "Use live data: what's the price of copper?",
    "What is a good synonym for the latest iPhone's name? Also what's the current iPhone price?",
    'How many letters of credit were issued today by HSBC?',
    "What's the difference between today's high and low in the Nasdaq?",
    "What's the latest question on the Jeopardy leaderboard tonight?",
    "What's the current answer from the city council on the stadium?",
    'I told my boss about it; what is the current price of Tesla stock?',
    'We talked about gold yesterday. What is the price of gold right now?',
    'You mentioned Apple. How is it trading now?',
    'As we discussed, please fetch the latest CPI figure',
    'What is the latest news about the conversation between Biden and Xi?',
    "What's the current topic trending on Reddit?",
    'Who is my current representative in Congress?',
    'Is the current heat wave in Spain over?',
    'How do the latest polls look for the election?',
    "What's the weather going to be like tonight in Dublin?",
    'Which stocks are up the most today?',
    "what's the live exchange rate for GBP/USD",
    'Check the live scores for me',
    'Get me the up to date train times from Leeds',
    'What did the Fed say today?',
    "What's the latest on the sentence for SBF?",
    'What is currently the hottest term on Google Trends?',
    'Are we on track for a recession right now?',
    "We're on holiday, what's the weather in Nice right now?",
    'What did the president say just now?',
    'What did the CEO write today on X?',
    'What does the latest jobs report mean for rates?',
    "What will today's rate cut mean for mortgages?",
    'WHAT IS THE CURRENT PRICE OF GOLD',
    'whats the weather rn in nyc right now',
    'latest news?',
    "Today's weather in Paris, please.",
    'Any live updates on the hurricane?',
    "Quick q: who's the current UK chancellor?",
    "What's the exchange rate of the rupee today? I need it for an invoice.",
    'How many points did LeBron score tonight?',
    'Is the Eiffel Tower open today?',
    'current btc price pls',
    'What are the latest Python releases? List them.',
    'Which teams are currently in the Champions League semis?',
    'What is the latest status of my request for a visa?',
    'What is the current value of our portfolio, given what you said?',
    'As I told you, I need the current price of gold',
    'Right now, what is the price of gold?',
]


def test_each_table_is_large_and_varied() -> None:
    """At least a dozen held-out directives of each kind that must not fire, and twenty that must."""
    assert min(len(QUOTED), len(MENTIONED), len(ABOUT_THE_CONVERSATION)) >= 12 and len(LIVE) >= 20


@pytest.mark.parametrize("directive", QUOTED)
def test_quoted_deixis_does_not_fire(directive: str) -> None:
    """Deixis inside quotation marks or a code span is not the request's own: it is cut out first."""
    assert not seeks_live_value(directive)


@pytest.mark.parametrize("directive", MENTIONED)
def test_deixis_mentioned_as_a_word_does_not_fire(directive: str) -> None:
    """A word talked about as a word (spelled, defined, translated, classed) asks for no live value."""
    assert not seeks_live_value(directive)


@pytest.mark.parametrize("directive", ABOUT_THE_CONVERSATION)
def test_deixis_about_the_conversation_does_not_fire(directive: str) -> None:
    """A question about what was said ("What did I just say?") asks for no value of the world now."""
    assert not seeks_live_value(directive)


@pytest.mark.parametrize("directive", LIVE)
def test_a_request_for_a_value_as_it_stands_now_still_fires(directive: str) -> None:
    """Quotes elsewhere, a frame word nearby or a nod to the conversation leave a live request live."""
    assert seeks_live_value(directive)


@pytest.mark.parametrize("directive", [
    "the word today, " * 5000,  # every occurrence mentioned: each one is judged
    "we said today, " * 3000,  # every occurrence about the conversation
    "what did we say today and " * 3000,
    "spell today, " * 6000,
    "'a " * 30000,  # openers with no closing mark
])
def test_a_long_directive_is_judged_in_linear_time(directive: str) -> None:
    """Pasted text can be long: each frame is read from a bounded window, so 50-100k characters take a
    fraction of a second (a quadratic scan took 40 s on the second case). The bound is loose on purpose:
    the machine is shared."""
    began = time.perf_counter()
    assert not seeks_live_value(directive)
    assert time.perf_counter() - began < 5.0


def test_freshness_is_satisfied_by_any_tool_the_embedder_declares_observing() -> None:
    """The classifier reads the directive alone; what satisfies it is a successful call of a tool whose
    declaration says it observes the world now, whatever its name: an embedder's quote feed counts, a
    tool named like this project's workspace tools that declares nothing does not."""
    def tool(name: str, observes: bool) -> ToolDecl:
        return ToolDecl(ToolSpec(name=name, description=f"{name}."), always_loaded=True, observes=observes)

    surface = Surface.build([tool("quote_feed", True), tool("read_file", False)])
    state = drift.start("What is copper trading at now?")
    assert state.live
    card = [(0, {"label": "Copper", "value": 9400, "unit": "USD/t"})]
    unobserved = drift.note_results(state, [(surface.observes("read_file"), False, "Copper: 9100 USD/t")])
    _, errors, _ = drift.gate_cards(unobserved, card, [])
    assert errors[0].startswith("[freshness-check]")
    observed = drift.note_results(state, [(surface.observes("quote_feed"), False, "copper 9400 USD/t")])
    _, errors, verdict = drift.gate_cards(observed, card, [])
    assert errors == {} and verdict.action == "continue"
