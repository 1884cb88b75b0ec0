"""What a token looks like on screen when a character's bytes span several tokens.

Byte-level tokenizers (SmolLM2's, GPT-2's) split a character such as "🍕" (f0 9f 8d 95) over tokens that
each decode to "�". The window shows the character once its last byte has arrived, on the token that holds
its first byte; until then each of those tokens shows its own bytes, as in ‹f0 9f›. A chart bar or the
hover shows a candidate's bytes that make no character there (a lone middle byte) as hex too. The ids and
the engine's text never change: this is display only (no Qt here)."""

REPLACEMENT = "\ufffd"


def char_length(lead: int) -> int:
    """The length of the UTF-8 sequence a byte starts, or 0 if it cannot start one."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def pending_label(data: bytes) -> str:
    """Bytes of a character not complete yet, shown as hex."""
    return "‹" + " ".join(f"{b:02x}" for b in data) + "›"


def split_chars(chunks: list[bytes]) -> tuple[list[str], int | None]:
    """(one display piece per chunk, the index of the chunk where an incomplete last character starts or
    None). A complete character goes to the chunk that holds its first byte; a byte that cannot be part
    of a character shows as �; the bytes of an incomplete last character show as hex on their own chunks."""
    flat = [(byte, index) for index, chunk in enumerate(chunks) for byte in chunk]
    pieces = [""] * len(chunks)
    position = 0
    while position < len(flat):
        byte, owner = flat[position]
        length = char_length(byte)
        if not length:  # a stray continuation byte, or one that never starts a character
            pieces[owner] += REPLACEMENT
            position += 1
            continue
        following = flat[position + 1 : position + length]
        if all(is_continuation(b) for b, _ in following) and len(following) < length - 1:
            for index in range(owner, len(chunks)):  # incomplete at the end: each chunk shows its bytes
                pieces[index] += pending_label(bytes(b for b, i in flat[position:] if i == index))
            return pieces, owner
        try:
            pieces[owner] += bytes(b for b, _ in flat[position : position + length]).decode("utf-8")
            position += length
        except (UnicodeDecodeError, ValueError):
            pieces[owner] += REPLACEMENT
            position += 1
    return pieces, None


def incomplete_tail(data: bytes) -> bytes:
    """The bytes at the end of `data` that start a character not complete yet (b"" if none)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if is_continuation(byte):
            continue
        length = char_length(byte)
        return data[-back:] if length > back else b""
    return b""


def candidate_label(pending: bytes, data: bytes, token: str) -> str:
    """A chart bar's (or the hover's) text: the character this token would complete after the pending bytes,
    else the token's own text with its bytes as hex where they are part of a character."""
    if REPLACEMENT not in token and not pending:
        return token
    completed = _completion(pending, data) if pending else None
    return completed if completed is not None else readable(data)


def _completion(pending: bytes, data: bytes) -> str | None:
    """What `data` shows after the first bytes of a character (`pending`): still bytes (hex), or the whole
    character then the rest; None if it does not go on with that character."""
    missing = char_length(pending[0]) - len(pending)
    head = data[:missing]
    if missing <= 0 or not all(is_continuation(b) for b in head):
        return None
    if len(head) < missing:
        return pending_label(pending + data)  # still bytes of the same character
    try:
        character = (pending + head).decode("utf-8")
    except UnicodeDecodeError:  # continuation bytes that make no character (an overlong or surrogate form)
        return None
    return character + readable(data[len(head) :])


def readable(data: bytes) -> str:
    """Bytes as text, with each run of bytes that make no whole character here (a character's start,
    middle or end) as hex: a candidate that is a split character's middle byte then reads ‹8f›, not �."""
    text = ""
    while data:
        try:
            return text + data.decode("utf-8")
        except UnicodeDecodeError as error:
            stop = error.end
            while stop < len(data) and is_continuation(data[stop]):
                stop += 1  # one label for the run, not one per byte
            text += data[: error.start].decode("utf-8") + pending_label(data[error.start : stop])
            data = data[stop:]
    return text


def shown(token: str) -> str:
    """A token as the chart, the tree and the lens label it: spaces as middle dots, a newline as ↵."""
    return token.replace(" ", "·").replace("\n", "↵")
