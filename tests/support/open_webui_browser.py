"""Chat with Open WebUI in Debian's real headless Chromium, as a person would: open the page, type, send, read.

Driven by Playwright (PyPI `playwright`, the test extra) on /usr/bin/chromium (tests/system-packages.sh): Playwright's
own browser download reaches outside the package registries, so it is never used. A fresh profile each time (a
first visit, as a new user's), with Chromium's own calls home switched off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
PAGE_TIMEOUT_MS = 120_000  # the first load compiles the page's scripts on a busy 2-core machine
ANSWER_TIMEOUT_S = 300.0  # a short answer from the kit's vLLM, while other tests may load the cores
CHAT_INPUT = "#chat-input"  # where a person types (a rich-text editor)
ANSWER = "#response-content-container"  # an answer's text, as Open WebUI renders it while it streams in
ANSWERED_BY = "#response-message-model-name"  # the model named above the answer
DONE = ".copy-response-button"  # shown under an answer once it is complete
TOOL_OUTPUT = "pre"  # a tool call's output, as its opened result shows it


@dataclass
class Reply:
    """What the page showed: the model named on the answer, the answer, and each text it showed while it streamed."""

    model: str
    answer: str
    seen: list[str] = field(default_factory=list)


def chat(base_url: str, prompt: str) -> Reply:
    """Open `base_url`, send `prompt` to the model the page has chosen, and read the answer streamed onto the page."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=list(FLAGS))
        try:
            page = browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            dismiss_whats_new(page)
            page.goto(base_url)
            page.locator(CHAT_INPUT).wait_for()
            page.evaluate(WATCH_ANSWER)
            page.locator(CHAT_INPUT).fill(prompt)
            page.locator(CHAT_INPUT).press("Enter")
            answer, seen = read_answer(page)
            return Reply(page.locator(ANSWERED_BY).last.inner_text().strip(), answer, seen)
        finally:
            browser.close()


def tool_result(base_url: str, prompt: str, tool: str) -> str:
    """Open `base_url`, send `prompt`, and once the answer is complete open the call of `tool` the page shows and read
    the result Open WebUI got from running it (the page's own "View Result from <tool>")."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=list(FLAGS))
        try:
            page = browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            dismiss_whats_new(page)
            page.goto(base_url)
            page.locator(CHAT_INPUT).fill(prompt)
            page.locator(CHAT_INPUT).press("Enter")
            page.locator(DONE).last.wait_for(timeout=ANSWER_TIMEOUT_S * 1000)
            page.get_by_text(tool).first.click()  # the calls, folded under "Exploring"
            page.get_by_text(f"View Result from {tool}").first.click()
            return page.locator(TOOL_OUTPUT).first.inner_text()
        finally:
            browser.close()


def dismiss_whats_new(page: Page) -> None:
    """A first visit opens the release notes over the chat when the page's start-up reaches them, which can be after
    the chat box shows (a check made once, then, misses them), and they trap the keyboard's focus (an Enter meant for
    the chat goes to them: the prompt stays unsent). A person closes them whenever they come; so does Playwright,
    before each action on the page from here on."""
    page.add_locator_handler(page.get_by_role("button", name="Okay, Let's Go!"), lambda button: button.click())


# Records each text the last answer shows, as the page renders it (a MutationObserver: every update, however fast the
# tokens come; polling from here would miss most of them).
WATCH_ANSWER = f"""() => {{
  window.kitAnswers = [];
  const record = () => {{
    const answers = document.querySelectorAll('{ANSWER}');
    const text = answers.length ? answers[answers.length - 1].innerText : '';
    if (text && window.kitAnswers[window.kitAnswers.length - 1] !== text) window.kitAnswers.push(text);
  }};
  new MutationObserver(record).observe(document.body, {{childList: true, subtree: true, characterData: true}});
}}"""


def read_answer(page: Page) -> tuple[str, list[str]]:
    """The answer's final text and each distinct text it showed on the way, once the page says it is complete
    (WATCH_ANSWER must be watching since before the prompt was sent)."""
    try:
        page.locator(DONE).last.wait_for(timeout=ANSWER_TIMEOUT_S * 1000)
    except PlaywrightTimeout:
        seen = page.evaluate("() => window.kitAnswers")
        unsent = page.locator(CHAT_INPUT).inner_text()
        raise TimeoutError(
            f"no complete answer on the page in {ANSWER_TIMEOUT_S:g} s; it showed {seen[-1:]}, the chat box held "
            f"{unsent!r}"
        ) from None
    return page.locator(ANSWER).last.inner_text(), page.evaluate("() => window.kitAnswers")
