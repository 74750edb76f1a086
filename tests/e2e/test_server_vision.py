"""Images through `dsv41 serve` with the openai client, on the vision-tiny fixture (2-layer ViT).

Usage: test_server_vision.py DSV41_BINARY VISION_MODEL_DIR TOKENIZER_JSON IMAGE_PNG
Checks: an image part's span counts in the prompt tokens (the fixture image: a 2x3 token grid, a span of 10);
the image changes the output (against another image); data URLs and --image-dir files; bad images, remote
URLs, paths outside --image-dir and too many images are 400s; the server keeps serving. 127.0.0.1 only, bounded.
"""
import base64
import os
import shutil
import struct
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import check, exit_with_summary, start_server, stop_server  # noqa: E402

import openai

BIN, MODEL, TOKENIZER, IMAGE = sys.argv[1:5]


def png(w, h, rgb):
    """A w x h RGB PNG of one colour (stdlib only)."""
    raw = b"".join(b"\x00" + bytes(rgb) * w for _ in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def data_url(b):
    return "data:image/png;base64," + base64.b64encode(b).decode()


fixture = open(IMAGE, "rb").read()
other = png(120, 80, (250, 20, 20))
imgdir = tempfile.mkdtemp(prefix="dsv41_img_")
shutil.copy(IMAGE, os.path.join(imgdir, "fixture.png"))
xdg = tempfile.mkdtemp(prefix="dsv41_xdg_")
server, base = start_server([BIN, "serve", "--model", MODEL, "--tokenizer", TOKENIZER, "--model-name", "vt",
                             "--image-dir", imgdir, "--max-images", "3"], env=dict(os.environ, XDG_CACHE_HOME=xdg))
try:
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=120, max_retries=0)

    def ask(content, **kw):
        return client.chat.completions.create(model="vt", messages=[{"role": "user", "content": content}],
                                              max_tokens=6, temperature=0, logprobs=True, top_logprobs=2, **kw)

    def image_part(url, kind="image_url"):
        return {"type": "image_url", "image_url": {"url": url}} if kind == "image_url" else \
               {"type": "input_image", "image_url": url}

    empty = ask("")
    one = ask([image_part(data_url(fixture))])
    check(one.usage.prompt_tokens == empty.usage.prompt_tokens + 10,
          f"the image's span (10 tokens) counts in the prompt: {one.usage.prompt_tokens} vs {empty.usage.prompt_tokens}")
    two = ask([image_part(data_url(fixture)), image_part(data_url(other), "input_image")])
    # Two parts join with "\n\n" (as text parts do), so the second adds its span and the separator's tokens.
    check(two.usage.prompt_tokens > one.usage.prompt_tokens + 10, f"two images: {two.usage.prompt_tokens}")
    red = ask([image_part(data_url(other))])
    check(red.usage.prompt_tokens == one.usage.prompt_tokens, "same grid, same span length")
    lp = lambda r: [round(e.logprob, 4) for e in r.choices[0].logprobs.content]
    check(lp(red) != lp(one), f"the image changes the output: {lp(one)} vs {lp(red)}")
    again = ask([image_part(data_url(fixture))])
    check(lp(again) == lp(one) and again.choices[0].message.content == one.choices[0].message.content,
          "the same image, the same answer")
    local = ask([image_part("fixture.png")])
    check(lp(local) == lp(one), "a file under --image-dir equals its data URL")

    truncated = fixture[: len(fixture) // 2]
    for content, what in [([image_part(data_url(truncated))], "truncated PNG"),
                          ([image_part("data:image/png;base64,@@@@")], "bad base64"),
                          ([image_part("https://example.com/a.png")], "remote URL"),
                          ([image_part("../etc/passwd")], "path outside --image-dir"),
                          ([image_part(data_url(b"not an image at all"))], "not an image"),
                          ([image_part(data_url(png(1, 1, (0, 0, 0))))] * 4, "too many images"),
                          ([{"type": "image_url"}], "image part without a URL")]:
        try:
            ask(content)
            check(False, f"{what}: accepted")
        except openai.BadRequestError as e:
            check(e.status_code == 400, f"{what}: 400 ({str(e)[:90]})")
    # A tiny image is scaled up to min_pixels and still works.
    small = ask([image_part(data_url(png(3, 2, (0, 0, 255))))])
    check(small.usage.prompt_tokens > empty.usage.prompt_tokens, "a 3x2 image is accepted (scaled up)")
    check(ask("").choices[0].message.content == empty.choices[0].message.content, "serves text as before")
finally:
    stop_server(server)
    shutil.rmtree(imgdir, ignore_errors=True)
    shutil.rmtree(xdg, ignore_errors=True)

exit_with_summary()
