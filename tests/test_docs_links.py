"""Every relative link of the README, the CHANGELOG and docs/*.md resolves:
the file exists, and an #anchor names a heading of it (GitHub's slugs).
Links to the web are not fetched."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(["README.md", "CHANGELOG.md", "bench/README.md"]
               + [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))])

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
_HTML_ID = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")


def _prose(text):
    """The text without its fenced code blocks (a `# comment` in a shell
    block is not a heading, a `[x](y)` in code is not a link)."""
    return _FENCE.sub("", text)


def slug(heading):
    """GitHub's anchor of a heading: lower case, inline code's backticks and
    other punctuation dropped (not `-` or `_`), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)       # a link's text only
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path):
    text = _prose(open(path, encoding="utf-8").read())
    seen, out = {}, set(_HTML_ID.findall(text))
    for h in _HEADING.findall(text):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(page, root=ROOT):
    """-> ["page: target (why)"] for each relative link that does not resolve."""
    path = os.path.join(root, page)
    bad = []
    for m in _LINK.finditer(_prose(open(path, encoding="utf-8").read())):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):          # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            bad.append(f"{page}: {target} (no such file)")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{page}: {target} (no heading #{anchor} in {os.path.relpath(dest, root)})")
    return bad


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## The `match_many` call\n\n"
                                            "```sh\n# not a heading\n```\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok too](docs/a.md#the-match_many-call) [web](https://example.org/x)\n"
        "[gone](docs/b.md) [no heading](docs/a.md#not-a-heading) [self](#a-title)\n"
        "```\n[in code](nowhere.md)\n```\n")
    assert broken_links("README.md", root=str(tmp_path)) == [
        "README.md: docs/b.md (no such file)",
        "README.md: docs/a.md#not-a-heading (no heading #not-a-heading in docs/a.md)",
        "README.md: #a-title (no heading #a-title in README.md)",
    ]


def test_slugs_follow_github():
    assert slug("Batches: `match_many`") == "batches-match_many"
    assert slug("AMQP (RabbitMQ topic exchanges)") == "amqp-rabbitmq-topic-exchanges"
    assert slug("The image format's role") == "the-image-formats-role"
    assert slug("`save`, `open`, `to_bytes` and `from_bytes`") == "save-open-to_bytes-and-from_bytes"
