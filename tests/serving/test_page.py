"""The translation page (GET /) as a user sees it: headless Chromium, driven by Selenium, on a real server
process with the tiny model. Its translations are compared with offline `translate_sentences`, its heatmap
with the attention endpoint's token counts, the line under it with the endpoint's engines. The browser tests
skip where Chromium, chromedriver or Selenium is missing (.ci/run installs them); the page's HTTP side is
checked in this process without them.
"""

import json
import shutil

import pytest
import requests
from fastapi.testclient import TestClient

from hf_vanilla.checkpoints.cards import set_decoding_defaults
from hf_vanilla.serving import RequestLimits, create_app
from hf_vanilla.translation.engines import EngineSettings

from .conftest import BEAM, STARTUP_SECONDS, Server

MAX_CHARACTERS = 120
WAIT_SECONDS = 60  # for an answer on a busy machine; a passing test waits a fraction of a second
SOURCES = ["Zwei junge Männer sind im Freien.", "Ein Hund läuft über die Wiese."]


def test_the_page_is_served_while_the_model_loads_and_attention_waits_for_it(served_model_dir):
    app = create_app(served_model_dir, EngineSettings(device="cpu"), limits=RequestLimits(max_beams=6))
    client = TestClient(app)  # outside a `with`, the worker never starts: the model is loading
    assert page_settings(client) == {
        "num_beams": 4, "length_penalty": 0.6, "max_beams": 6, "max_length_penalty": 10.0,
        "max_characters": 20_000, "pair": ["de", "en"],
    }  # fmt: skip
    assert "3.2.1" in client.get("/").text and "3.2.2" in client.get("/").text
    loading = client.post("/attention", json={"inputs": SOURCES[0]})
    assert loading.status_code == 503 and loading.json() == {"error": "the model is loading"}
    assert client.get("/ready").status_code == 503


def page_settings(client: TestClient) -> dict:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    return json.loads(page.text.split("const SETTINGS = ", 1)[1].split(";\n", 1)[0])


def test_a_greedy_checkpoints_page_offers_beam_search_the_papers_length_penalty(served_model_dir, tmp_path):
    checkpoint = shutil.copytree(served_model_dir, tmp_path / "greedy")
    set_decoding_defaults(checkpoint, 1, None)
    settings = page_settings(TestClient(create_app(checkpoint, EngineSettings(device="cpu"))))
    assert (settings["num_beams"], settings["length_penalty"]) == (1, 0.6)


@pytest.fixture(scope="module")
def page_server(served_model_dir, tmp_path_factory):
    server = Server(
        served_model_dir,
        tmp_path_factory.mktemp("page") / "server.log",
        "--request-max-characters",
        str(MAX_CHARACTERS),
    )
    try:
        server.wait_until_ready(STARTUP_SECONDS)
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium, or a skip saying what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="the page's test needs pip install selenium")
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.skip("the page's test needs Chromium: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(argument)
    # The Debian driver named, so that Selenium Manager never looks for one on the network.
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=chromedriver))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser, page_server):
    """The page, loaded and ready to translate."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(page_server.url)
    WebDriverWait(browser, WAIT_SECONDS).until(
        lambda driver: driver.find_element("id", "translate").is_enabled()
    )
    return browser


def translate_on(page, text: str, num_beams: int | None = None, press_keys: bool = False) -> str:
    """Type `text` (and a beam size) into the page, ask for its translation, and read it back."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    source = page.find_element("id", "source")
    source.clear()
    source.send_keys(text)
    if num_beams is not None:
        beams = page.find_element("id", "num-beams")
        beams.clear()
        beams.send_keys(str(num_beams))
    page.execute_script('document.getElementById("time").textContent = ""')
    if press_keys:
        source.send_keys(Keys.CONTROL, Keys.ENTER)
    else:
        page.find_element("id", "translate").click()
    WebDriverWait(page, WAIT_SECONDS).until(
        lambda driver: driver.find_element("id", "time").text or driver.find_element("id", "error").text
    )
    return page.find_element("id", "translation").text


def test_the_page_translates_as_translate_sentences_does(page, offline):
    assert translate_on(page, SOURCES[0]) == offline(SOURCES[:1], **BEAM)[0]
    assert page.find_element("id", "time").text.startswith("Translated in ")
    assert (
        translate_on(page, SOURCES[1], num_beams=1, press_keys=True) == offline(SOURCES[1:], num_beams=1)[0]
    )
    assert page.find_element("id", "length-penalty").get_attribute("disabled")  # greedy search takes none
    assert page.find_element("id", "error").text == ""


def heatmap_shape(page) -> tuple[int, list[int]]:
    """The heatmap's rows, and the cells of each."""
    rows = page.find_elements("css selector", "#heatmap tbody tr")
    return len(rows), [len(row.find_elements("tag name", "td")) for row in rows]


def test_the_heatmap_has_a_row_an_output_token_and_a_column_a_source_token(page, page_server):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select, WebDriverWait

    translation = translate_on(page, SOURCES[0], num_beams=2)
    page.find_element("id", "show-attention").click()
    WebDriverWait(page, WAIT_SECONDS).until(lambda driver: heatmap_shape(driver)[0])
    expected = page_server.attention(
        SOURCES[0], True, num_beams=2, length_penalty=BEAM["length_penalty"]
    ).json()
    assert expected["translation_text"] == translation
    sources, outputs = len(expected["source_tokens"]), len(expected["output_tokens"])
    assert heatmap_shape(page) == (outputs, [sources] * outputs)
    labels = [th.text for th in page.find_elements("css selector", "#heatmap thead th")[1:]]
    assert labels == expected["source_tokens"]
    engine_line = page.find_element("id", "attention-engine").text
    assert engine_line == f"Attention from the {expected['attention_engine']} engine."
    assert [option.text for option in Select(page.find_element("id", "layer")).options] == ["1", "2"]

    assert [option.text for option in Select(page.find_element("id", "head")).options][1:] == [
        "1",
        "2",
        "3",
        "4",
    ]
    Select(page.find_element("id", "head")).select_by_visible_text("3")  # fetches every head's weights
    WebDriverWait(page, WAIT_SECONDS).until(
        lambda driver: driver.execute_script("return attention.cross_attention_heads")
    )
    assert heatmap_shape(page) == (outputs, [sources] * outputs)

    # Pointing at an output token highlights the source token its row (last layer, head 3) weighs most.
    row = expected["cross_attention_heads"][-1][2][0]
    most_attended = expected["source_tokens"][row.index(max(row))]
    ActionChains(page).move_to_element(page.find_element("css selector", "#heatmap tbody th")).perform()
    assert [th.text for th in page.find_elements("css selector", "#heatmap thead th.aligned")] == [
        most_attended
    ]
    assert page.find_element("id", "alignment").text.startswith(
        f"“{expected['output_tokens'][0]}” attends most to “{most_attended}”"
    )


def test_a_refused_request_shows_its_error_line_as_a_sentence(page):
    too_long = "Ein Hund läuft über die Wiese. " * 5
    translate_on(page, too_long)
    characters = len(too_long)
    assert page.find_element("id", "error").text == (
        f"The server refused the request (413): {characters} characters in one request, this server takes at "
        f"most {MAX_CHARACTERS} (--request-max-characters)."
    )
    translate_on(page, SOURCES[0])
    assert page.find_element("id", "error").text == ""
    assert requests.get(f"{page.current_url}ready", timeout=5).status_code == 200
