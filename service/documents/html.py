"""HTML as segments, parsed by selectolax's Lexbor (an HTML5 parser: malformed input is read as browsers read
it, and parsing never fails).

Roles and rules (docs/documents.md, "Formats"): block elements (BLOCKS, and an inline element that holds
one) and `<br>` bound sentences; within a block, inline elements become covering marks (their tags go back
around the words they cover), and what is kept as it is (KEPT elements, `translate="no"` with its
descendants, comments, images and other void elements, placeholders) becomes atoms. Attributes are kept.
The model reads decoded text (`&amp;` -> `&`), whitespace collapsed; the output is escaped again.
Contract: the output is serialized HTML, a full document if the input has `<html>`, `<head>`, `<body>` or a
doctype, else a fragment; with identity outputs its tree is the input's (whitespace within sentences
collapsed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from selectolax.lexbor import LexborHTMLParser, LexborNode

from service.documents import placeholders
from service.documents.runs import Laid, Run

_BLOCK_NAMES = """
address article aside base blockquote body br caption center col colgroup dd details dialog dir div dl dt
fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html legend li
link main menu meta nav ol optgroup option p search section select summary table tbody td tfoot th thead title
tr ul
"""
_KEPT_NAMES = """
script style code pre textarea kbd samp var svg math template noscript iframe object embed canvas audio video
xmp plaintext noembed noframes listing
"""
_VOID_NAMES = "area base br col embed hr img input link meta param source track wbr keygen"
BLOCKS = frozenset(_BLOCK_NAMES.split())  # bound sentences
KEPT = frozenset(_KEPT_NAMES.split())  # kept as they are, with their descendants
_KEPT_BLOCKS = frozenset(["pre", "textarea", "xmp", "plaintext", "listing", "template", "noscript"])
_READ = frozenset(
    ["code", "kbd", "samp", "var"]
)  # kept, but read by the segmenter (as words of the sentence)
VOID = frozenset(_VOID_NAMES.split())
_BLOCK_SELECTOR = ",".join(sorted(BLOCKS | _KEPT_BLOCKS))
_DOCUMENT = re.compile(r"<(?:!doctype|html|head|body)[\s/>]", re.I)


def escape(text: str) -> str:
    """Text as HTML serializes it."""
    return text.replace("&", "&amp;").replace("\xa0", "&nbsp;").replace("<", "&lt;").replace(">", "&gt;")


def _attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace("\xa0", "&nbsp;").replace('"', "&quot;")


def start_tag(node: LexborNode) -> str:
    """The start tag of an element, its attributes as parsed."""
    attributes = "".join(
        f" {name}" if value is None else f' {name}="{_attribute(value)}"'
        for name, value in node.attributes.items()
    )
    return f"<{node.tag}{attributes}>"


def parse(text: str, language: str | None, protect: Sequence[re.Pattern[str]] = ()) -> Laid:
    """The segments of an HTML document or fragment and the document that renders them back."""
    walker = _Walker(Laid(escape), language, protect)
    if _DOCUMENT.search(text):
        tree = LexborHTMLParser(text)
        first = (
            tree.root.parent.child if tree.root is not None and tree.root.parent is not None else tree.root
        )
    else:
        first = LexborHTMLParser(text, is_fragment=True).root
        walker.whole = first.mem_id if first is not None else None
    node = first
    while node is not None:
        walker.node(node)
        node = node.next
    walker.flush()
    return walker.laid


class _Walker:
    """Walks the tree in document order, feeding literal markup and runs to a Laid document."""

    def __init__(self, laid: Laid, language: str | None, protect: Sequence[re.Pattern[str]]) -> None:
        self.laid = laid
        self.language = language
        self.protect = protect
        self.run: Run | None = None
        self.whole: int | None = None  # the first node of a fragment, whose .html is the whole fragment

    def outer(self, node: LexborNode) -> str:
        """The node as HTML."""
        if node.is_comment_node:  # its data cannot hold "-->"
            markup = node.html or ""
            return markup[: markup.find("-->") + 3] if "-->" in markup else markup
        if node.mem_id == self.whole:
            end = "" if node.tag in VOID else f"</{node.tag}>"
            return start_tag(node) + (node.inner_html or "") + end
        return node.html or ""

    def flush(self) -> None:
        if self.run is not None:
            self.laid.add(self.run, self.language, normalise=True)
            self.run = None

    def literal(self, markup: str) -> None:
        self.flush()
        self.laid.literal(markup)

    def inline(self) -> Run:
        if self.run is None:
            self.run = Run()
        return self.run

    def node(self, node: LexborNode) -> None:
        if node.is_text_node:
            run = self.inline()
            for stretch, protected in placeholders.split(node.text_content or "", self.protect):
                if protected:
                    run.atom(escape(stretch), stretch)
                else:
                    run.text(stretch)
            return
        tag = node.tag or ""
        if not node.is_element_node or tag.startswith("-"):  # comment, doctype
            self.inline().atom(self.outer(node))
            return
        if tag in KEPT or (node.attributes.get("translate") or "").strip().lower() == "no":
            if tag in BLOCKS or tag in _KEPT_BLOCKS:
                self.literal(self.outer(node))
            else:
                self.inline().atom(self.outer(node), (node.text_content or "") if tag in _READ else "")
            return
        if tag in VOID:
            if tag in BLOCKS:
                self.literal(start_tag(node))
            else:
                self.inline().atom(start_tag(node))
            return
        if tag in BLOCKS or node.css_first(_BLOCK_SELECTOR) is not None:
            self.literal(start_tag(node))
            self.children(node)
            self.literal(f"</{tag}>")
            return
        self.inline().open(start_tag(node))
        self.children(node)
        self.inline().close(f"</{tag}>")

    def children(self, node: LexborNode) -> None:
        child = node.child
        while child is not None:
            self.node(child)
            child = child.next
