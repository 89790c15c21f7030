"""The language collnb speaks to a learner: English, or Simplified Chinese (``zh``).

Every sentence a learner reads from collnb (widget labels, status lines, picture titles and
captions, exercise checks, the explanation of a failed launch, the command line) is written in
English in the code, wrapped in :func:`_`, and translated through gettext catalogues
(``collnb/locale/zh_CN/LC_MESSAGES/collnb-*.mo``, compiled from the ``.po`` beside each by Babel:
``make i18n``). torch's own messages are never translated: they are quoted as torch wrote them.

One switch: :func:`set_language` (``collnb.set_language("zh")``, the Chinese notebooks' first
cell), else the environment variable ``COLLNB_LANG`` (``zh`` or ``en``), else the locale
(``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``: ``zh_CN.UTF-8`` gives Chinese), else English.

How to write a translatable string (``tests/test_i18n.py`` checks every one has its Chinese):

* call :func:`_` when the text is shown, not at import: ``_("world size")``, so a later
  :func:`set_language` takes effect; a module-level table marks its strings with :func:`N_` and
  translates them where they are used (``_(LABELS[key])``);
* give placeholders names and fill them after translating:
  ``_("rank {rank} failed").format(rank=r)`` (an f-string cannot be looked up);
* plurals: ``ngettext("{n} rank", "{n} ranks", n).format(n=n)``;
* a sentence kept in an object drawn again later (a trace's round details) is made with
  :func:`later` (``later("step {k}", k=k)``, a ``str`` that remembers its message) and shown with
  :func:`again`, which gives it in the language spoken then.
"""

from __future__ import annotations

import gettext
import os
import warnings
from functools import lru_cache
from pathlib import Path

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: The languages collnb speaks: code -> gettext locale directory name.
LANGUAGES = {"en": "en", "zh": "zh_CN"}
#: What :func:`set_language` accepts for each language (case- and ``-``/``_``-insensitive).
ALIASES = {"en": "en", "english": "en", "c": "en", "posix": "en",
           "zh": "zh", "zh_cn": "zh", "zh_hans": "zh", "zh_sg": "zh", "chinese": "zh", "中文": "zh"}
ENV = "COLLNB_LANG"

_chosen: str | None = None
#: ``COLLNB_LANG`` as this process found it: ``set_language(None)`` puts it back.
_ENV_AT_START = os.environ.get(ENV)
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def _normalise(language: str) -> str | None:
    key = language.strip().lower().replace("-", "_").split(".", 1)[0].split("@", 1)[0]
    if key in ALIASES:
        return ALIASES[key]
    if key.startswith("zh_hans") or key in ("zh_cn", "zh_sg"):
        return "zh"
    if key == "en" or key.startswith("en_"):
        return "en"
    return None


def _from_environment() -> str:
    chosen = os.environ.get(ENV, "").strip()
    if chosen:
        found = _normalise(chosen)
        if found is None:
            _warn_once("env:" + chosen, f"{ENV}={chosen!r} is not a language collnb speaks ('en' or 'zh'): "
                       f"speaking English")
        return found or "en"
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(name, "")
        if value:
            # LANGUAGE may list several ("zh_CN:en"): the first one collnb speaks wins
            for part in value.split(":"):
                found = _normalise(part)
                if found:
                    return found
            return "en"
    return "en"


#: The variables the language is read from, in order, as ``os.environ`` keeps its keys (bytes on POSIX).
_VARIABLES = (ENV, "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
_ENVIRON_DATA = getattr(os.environ, "_data", None)  # CPython's os._Environ: its keys and values as stored
_ENCODED = tuple(os.environ.encodekey(v) for v in _VARIABLES) if hasattr(os.environ, "encodekey") else None
_last_read: tuple[tuple[object, ...], str] | None = None  # (those variables' values, the language they gave)


def _from_environment_cached() -> str:
    """:func:`_from_environment`, read again only when one of its variables changed: every translated
    line asks (a slider move of an explorer, about 400 times), and reading five variables through
    ``os.environ.get`` cost about 17 us a time (the missing ones raise KeyError inside), a few ms a move;
    comparing their stored values costs well under one."""
    global _last_read
    if _ENVIRON_DATA is None or _ENCODED is None:
        return _from_environment()
    values = tuple(map(_ENVIRON_DATA.get, _ENCODED))
    if _last_read is None or _last_read[0] != values:
        _last_read = (values, _from_environment())
    return _last_read[1]


def get_language() -> str:
    """The language collnb speaks now: ``"en"`` or ``"zh"``."""
    return _chosen if _chosen is not None else _from_environment_cached()


def set_language(language: str | None) -> str:
    """Speak ``language`` from now on: ``"zh"`` (Simplified Chinese) or ``"en"``.

    Args:
        language: ``"zh"``, ``"zh-CN"``, ``"zh_CN.UTF-8"``, ``"中文"``, ``"en"`` ... (case does not
            matter); ``None`` goes back to the default (``COLLNB_LANG``, then the locale).

    Returns:
        The language now spoken: ``"en"`` or ``"zh"``.

    Raises:
        ValueError: a language collnb does not speak; the message lists the ones it does.

    It also sets ``COLLNB_LANG`` in this process's environment, so rank processes and command lines
    started from here speak it too.
    """
    global _chosen
    if language is None:
        _chosen = None
        if _ENV_AT_START is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = _ENV_AT_START  # the learner's own COLLNB_LANG, as this process found it
        return get_language()
    found = _normalise(language) if isinstance(language, str) else None
    if found is None:
        raise ValueError(_("collnb speaks {languages}, not {language}: call collnb.set_language(\"zh\") for Chinese "
                           "or collnb.set_language(\"en\") for English").format(
                               languages=" / ".join(repr(k) for k in LANGUAGES), language=repr(language)))
    _chosen = found
    os.environ[ENV] = found
    return found


@lru_cache(maxsize=None)
def _catalogue(language: str) -> gettext.NullTranslations:
    """Every ``collnb-*.mo`` catalogue of ``language``, chained (the first that has a message wins)."""
    folder = LOCALE_DIR / LANGUAGES[language] / "LC_MESSAGES"
    chain: gettext.NullTranslations = gettext.NullTranslations()
    files = sorted(folder.glob("collnb-*.mo")) if language != "en" else []
    if language != "en" and not files:
        _warn_once("mo:" + language, f"collnb's {language} catalogues are missing from {folder}: everything stays "
                   f"in English. Reinstall collnb (pip install -e . in its repository) to get them back")
    for mo in files:
        with open(mo, "rb") as f:
            found = gettext.GNUTranslations(f)
        found.add_fallback(chain)
        chain = found
    return chain


def _(message: str) -> str:
    """``message`` in the language spoken now (the English text itself where no translation exists)."""
    return _catalogue(get_language()).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form of a message, in the language spoken now."""
    return _catalogue(get_language()).ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Mark ``message`` for translation without translating it (a module-level table's entry)."""
    return message


class Later(str):
    """A sentence shown in the language spoken when it was made, that can be shown again in the
    language spoken later (:func:`again`). Made by :func:`later`; it *is* the translated text
    (a ``str``), and keeps its English ``msgid`` and its ``fields`` (placeholders: plain values, or
    Later sentences themselves, translated again with it).

    What lives on after the language may change says itself this way: an algorithm's round
    details, made when a trace is recorded and drawn whenever its replay is (a trace recorded in
    English and replayed after ``set_language("zh")`` shows Chinese). Its text never changes:
    copied or pickled, it is the same words, still a Later (a copy of a trace equals the trace).
    """

    msgid: str
    fields: dict[str, object]

    def __new__(cls, msgid: str, fields: dict[str, object], text: str | None = None) -> Later:
        made = super().__new__(cls, _format(msgid, fields) if text is None else text)
        made.msgid, made.fields = msgid, fields
        return made

    def __reduce__(self) -> tuple[type[Later], tuple[str, dict[str, object], str]]:
        return (Later, (self.msgid, self.fields, str(self)))

    def __copy__(self) -> Later:
        return self  # immutable, as a str

    def __deepcopy__(self, memo: dict[int, object]) -> Later:
        return self


def _format(msgid: str, fields: dict[str, object]) -> str:
    text = _(msgid)
    return text.format(**{k: again(v) if isinstance(v, str) else v for k, v in fields.items()}) if fields else text


def later(message: str, **fields: object) -> Later:
    """``_(message).format(**fields)``, as a :class:`Later`: the same text now, and :func:`again`
    gives it in the language spoken then. ``message`` is a message like ``_()``'s (``make i18n``
    collects it); a field may be a Later itself (``what=later(N_("the result"))``)."""
    return Later(message, fields)


def again(text: str) -> str:
    """``text`` in the language spoken now when it is a :class:`Later`; any other string unchanged."""
    return _format(text.msgid, text.fields) if isinstance(text, Later) else text


def reload_catalogues() -> None:
    """Read the ``.mo`` files again (after ``make i18n`` in a running kernel)."""
    _catalogue.cache_clear()
