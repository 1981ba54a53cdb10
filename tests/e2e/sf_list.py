"""A small parser of RFC 9651 (Structured Field Values for HTTP) Lists,
written from the RFC's parsing algorithm (section 4.2), to read the
RateLimit-Policy and RateLimit headers as a client library would.  It
covers what those headers may hold -- Items that are Strings, Tokens,
Integers or Booleans, with Parameters -- and refuses what it does not
know (Inner Lists, Decimals, Byte Sequences, Dates, Display Strings) as
well as anything malformed, with ValueError.

parse_list('"a";q=5;w=60, "b";q=1;w=1') ->
    [("a", {"q": 5, "w": 60}), ("b", {"q": 1, "w": 1})]

Strings come back as str (their escapes undone), Tokens as Token (a str
subclass), Integers as int, Booleans as bool; a Parameter's order is kept
(dicts are ordered), and a repeated Parameter key overwrites, as section
4.2.3.2 says."""

LCALPHA = "abcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"
ALPHA = LCALPHA + LCALPHA.upper()
TCHAR = ALPHA + DIGITS + "!#$%&'*+-.^_`|~"


class Token(str):
    pass


class _P:
    def __init__(self, text):
        self.s = text
        self.i = 0

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def take(self):
        c = self.peek()
        self.i += 1
        return c

    def fail(self, why):
        raise ValueError("%s at %d in %r" % (why, self.i, self.s))


def parse_list(text):
    """RFC 9651 section 4.2: leading and trailing SP are discarded, then a
    List; an empty field value is an empty List."""
    if any(ord(c) > 0x7e or (ord(c) < 0x20) for c in text):
        raise ValueError("not ASCII text: %r" % text)
    p = _P(text.strip(" "))
    members = []
    while p.i < len(p.s):
        if p.peek() == "(":
            p.fail("inner lists not supported here")
        members.append(_item(p))
        while p.peek() in (" ", "\t") and p.peek():
            p.take()
        if p.i >= len(p.s):
            return members
        if p.take() != ",":
            p.fail("expected ','")
        while p.peek() in (" ", "\t") and p.peek():
            p.take()
        if p.i >= len(p.s):
            p.fail("trailing ','")
    return members


def _item(p):
    return _bare(p), _params(p)


def _bare(p):
    c = p.peek()
    if c == "-" or (c and c in DIGITS):
        return _integer(p)
    if c == '"':
        return _string(p)
    if c == "?":
        p.take()
        v = p.take()
        if v not in ("0", "1"):
            p.fail("bad boolean")
        return v == "1"
    if c and (c in ALPHA or c == "*"):
        return _token(p)
    p.fail("unsupported or bad bare item")


def _integer(p):
    sign = 1
    if p.peek() == "-":
        p.take()
        sign = -1
    digits = ""
    while p.peek() and p.peek() in DIGITS:
        digits += p.take()
        if len(digits) > 15:
            p.fail("integer longer than 15 digits")
    if not digits:
        p.fail("expected a digit")
    if p.peek() == ".":
        p.fail("decimals not supported here")
    return sign * int(digits)


def _string(p):
    p.take()  # the opening DQUOTE
    out = ""
    while p.i < len(p.s):
        c = p.take()
        if c == "\\":
            if p.i >= len(p.s):
                p.fail("string ends in a backslash")
            n = p.take()
            if n not in ('"', "\\"):
                p.fail("bad escape \\%s" % n)
            out += n
        elif c == '"':
            return out
        elif ord(c) < 0x20 or ord(c) > 0x7e:
            p.fail("bad string character")
        else:
            out += c
    p.fail("unterminated string")


def _token(p):
    out = p.take()
    while p.peek() and (p.peek() in TCHAR or p.peek() in ":/"):
        out += p.take()
    return Token(out)


def _params(p):
    params = {}
    while p.peek() == ";":
        p.take()
        while p.peek() == " ":
            p.take()
        c = p.peek()
        if not c or not (c in LCALPHA or c == "*"):
            p.fail("bad parameter key")
        key = ""
        while p.peek() and p.peek() in LCALPHA + DIGITS + "_-.*":
            key += p.take()
        value = True
        if p.peek() == "=":
            p.take()
            value = _bare(p)
        params[key] = value
    return params
