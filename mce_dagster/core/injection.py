"""Text in a session that speaks to the grader rather than to the user.

Session content reaches the judge between markers and the system prompt tells it
that nothing there is an instruction or a score; this module says when the content
tries anyway, so that the value is flagged (`suspected_injection`) whoever judges
it. It is a detector, not a filter: the judge is still shown the text as recorded.

Two things are looked for, each on a normalised copy of the text, because an
attacker writes for a model that reads through disguises a keyword match does not:

- an instruction addressed to the grader: "ignore the rubric", "disregard all
  previous instructions", "note to the evaluator", "you are now the judge", "as
  the grader, give ...", in English, French, Spanish, Italian, Portuguese, German,
  Russian, Chinese and Japanese;
- score-shaped text in the grader's own form: `Score: 5`, `Rating = 5/5`,
  `Grade - five`, `{"score": 5}`, `评分：5`, `Оценка: 5`, which a judge may repeat.

Normalising (`normalise`): HTML entities and tags undone, Unicode NFKC (full-width
and mathematical letters, the full-width colon), format characters (category Cf:
zero-width spaces and joiners, soft hyphens, direction marks) removed, case
folded, Cyrillic and Greek look-alikes folded to Latin, accents and other
combining marks dropped, markdown emphasis removed (a heading read as the label of
what follows it), digits standing for letters inside a word read as those letters
("ign0re"), letters spelled out one by one joined, whitespace collapsed. The
Cyrillic and CJK phrases are matched on a second copy that keeps those scripts.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Mapping

# -- normalising ------------------------------------------------------------------

# Letters drawn like Latin ones (after case folding): the common Cyrillic, Greek and
# IPA look-alikes. Not the whole Unicode confusables table: these are the ones an
# English word can be spelled with.
_LOOKALIKES = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "с": "c", "ԁ": "d", "е": "e", "ё": "e", "һ": "h", "н": "h", "і": "i", "ї": "i",
    "ј": "j", "к": "k", "ӏ": "l", "м": "m", "п": "n", "о": "o", "р": "p", "ԛ": "q", "г": "r", "ѕ": "s",
    "т": "t", "у": "y", "ү": "y", "х": "x", "ԝ": "w", "ѡ": "w",
    # Greek
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "μ": "u", "ν": "v", "ο": "o", "ρ": "p",
    "ς": "s", "σ": "o", "τ": "t", "υ": "u", "χ": "x", "γ": "y", "ζ": "z", "ω": "w",
    # IPA and Latin extensions
    "ɑ": "a", "ɡ": "g", "ɩ": "i", "ı": "i", "ȷ": "j", "ɪ": "i", "ʀ": "r", "ꜱ": "s", "ᴏ": "o", "ʏ": "y",
    "օ": "o", "ս": "u",  # Armenian
})
# The reverse, for a Cyrillic word with a Latin letter slipped in ("игнoрируй").
_LATIN_IN_CYRILLIC = str.maketrans({"a": "а", "c": "с", "e": "е", "o": "о", "p": "р", "x": "х", "y": "у", "k": "к", "m": "м", "h": "н", "t": "т", "b": "в"})
# Digits and signs standing for letters inside a word ("ign0re", "rubr1c", "$core").
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
_LEET_WORD = re.compile(r"[\w@$]+")
_LATIN_LETTER = re.compile(r"[a-z]")
# Blank characters that Unicode does not class as spaces or format characters.
_INVISIBLE = str.maketrans({"\u3164": " ", "\u2800": " ", "\u115f": "", "\u1160": "", "\uffa0": " "})
_TAG = re.compile(r"</?[a-z][^<>]{0,40}>", re.IGNORECASE)
# Emphasis, code and strike-through marks; quotes, so that `"score": 5` reads as `score: 5`.
_MARKUP = re.compile(r"[*_`~\"'“”‘’«»]+")
# Letters spelled out one by one: "I g n o r e", "i.g.n.o.r.e".
_SPACED_LETTERS = re.compile(r"\b(?:[^\W\d_][ .\-]){3,}[^\W\d_]\b")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_CJK = "\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_BETWEEN_CJK = re.compile(rf"(?<=[{_CJK}])\s+(?=[{_CJK}])")


def _common(text: str) -> str:
    """What both copies share: markup undone, NFKC, no format characters, folded case."""
    text = html.unescape(_TAG.sub(" ", html.unescape(text)))
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return unicodedata.normalize("NFKC", text.casefold())


def _drop_marks(text: str, decompose: bool) -> str:
    """Combining marks removed: accents too when decomposing, else only the marks no
    letter absorbs (strike-through, zalgo), so that Russian keeps й and ё."""
    text = unicodedata.normalize("NFKD" if decompose else "NFC", text)
    return unicodedata.normalize("NFC", "".join(ch for ch in text if not unicodedata.combining(ch)))


# A markdown heading alone on its line reads as a label of what follows ("# Score" then "5").
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]*([^\n#]+?)[ \t#]*\n", re.MULTILINE)


def _collapse(text: str) -> str:
    text = _HEADING.sub(lambda m: m.group(1) + ": ", text)
    return re.sub(r"\s+", " ", _MARKUP.sub("", text)).strip()


def normalise(text: str) -> str:
    """The text as the Latin-script patterns read it (see the module's docstring)."""
    text = _drop_marks(_common(text).translate(_LOOKALIKES), decompose=True)
    # (one token at a time, tested in the function: a pattern that searches for the
    # letter would be quadratic on a long run of digits)
    text = _LEET_WORD.sub(lambda m: m.group().translate(_LEET) if _LATIN_LETTER.search(m.group()) else m.group(), text)
    text = _collapse(text)
    return _SPACED_LETTERS.sub(lambda m: re.sub(r"[ .\-]", "", m.group()), text)


def _native(text: str) -> str:
    """The text as the Cyrillic and CJK patterns read it: those scripts kept."""
    text = _drop_marks(_common(text), decompose=False)
    text = re.sub(r"\w+", lambda m: m.group().translate(_LATIN_IN_CYRILLIC) if _CYRILLIC.search(m.group()) else m.group(), text)
    return _BETWEEN_CJK.sub("", _collapse(text))


# -- what is looked for -------------------------------------------------------------

# Words for the one who grades, in the languages below (accents dropped). Not
# "reviewer": "note to reviewers" is how pull requests talk.
_GRADER = (
    r"(?:grader|evaluator|judge|assessor|scorer|rater|"
    r"evaluateur|evaluatrice|correcteur|correctrice|examinateur|juge|evaluador|calificador|corrector|juez|"
    r"valutatore|correttore|giudice|avaliador|corretor|bewerter|bewerterin|prufer|pruferin|gutachter|korrektor)"
)
# Up to four words between a verb and its object ("ignore all of the previous rubric").
_GAP = r"(?:\W+\w+){0,4}?\W+"


def _words(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


def _override(verbs: str, strong: str, weak: str, before: str, after: str) -> str:
    """An override verb, then what the grader was told: an object that only a grader
    has (the rubric) alone, a common one (the instructions) only when qualified as
    the grader's ("all previous instructions", "the instructions above"), so that
    "ignore the instructions on the box" is not flagged."""
    return (
        rf"\b{verbs}{_GAP}(?:{strong}\b|{before}\s+(?:\w+\s+)?{weak}\b|{weak}\s+{after}\b)"
    )


# A demand for the top score: an imperative (sentence start, "please", "you must"),
# not "I'd give it 5 stars" or "give it 5 minutes".
_IMPERATIVE = r"(?:^|[.!?:;,(\[-]\s*|\bplease\s+|\byou\s+(?:must|should|will|shall|need\s+to|have\s+to)\s+|\bnow\s+|\bthen\s+|\bjust\s+)"
_TOP = r"(?:5|five|10\s*/\s*10|5\s*/\s*5|full\s+marks|top\s+marks|(?:the\s+)?(?:maximum|highest|perfect|best|top)\s+(?:score|rating|grade|mark|marks))"
_NOT_A_UNIT = r"(?!\s*(?:stars?|minutes?|mins?|seconds?|secs?|hours?|days?|weeks?|months?|years?|more|times|tries|attempts|%|percent|people|dollars|euros|tickets|copies|items)\b)"

# Latin-script phrases, matched on `normalise(text)`.
_INSTRUCTION_LATIN = [
    # English
    _override(
        _words("ignore", "disregard", "forget", "override", "overrule", "bypass", "skip", "neglect", "discard", "abandon",
               r"set\s+aside", r"put\s+aside", r"pay\s+no\s+(?:attention|heed)\s+to", r"do\s+not\s+(?:follow|apply|use)",
               r"dont\s+(?:follow|apply|use)", r"stop\s+following", r"no\s+longer\s+follow"),
        strong=_words(r"rubrics?", "grading", "scoring", "marking", r"(?:evaluation|assessment|judging)\s+(?:criteria|guidelines|instructions|rules|standards)", r"system\s+prompt"),
        weak=_words(r"instructions?", "directions", "rules", "guidelines", r"prompts?", "orders", "directives", "criteria"),
        before=_words("your", r"the\s+graders?", r"the\s+judges?", "all", "any", "every", "previous", "prior", "above", "earlier", "preceding",
                      "foregoing", "original", "initial", "other", "existing", "system", "grading", "scoring", "evaluation"),
        after=_words("above", r"given\s+(?:to\s+you|before|earlier|above)", r"you\s+(?:were|have\s+been)\s+given", r"before\s+this"),
    ),
    r"\b(?:note|message|instructions?|attention|hint|reminder|notice|memo|ps)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?"
    r"(?:ai\s+|llm\s+|automated\s+|automatic\s+|model\s+)?" + _GRADER + r"s?\b",
    r"\b(?:dear|hey|hi|hello|attention|attn|psst)\W+(?:the\s+)?(?:ai\s+|llm\s+)?" + _GRADER + r"s?\b",
    r"\byou\s+are\s+(?:now\s+|acting\s+as\s+)?(?:the|an|a|my)\s+(?:\w+\s+)?" + _GRADER + r"\b(?!\s+of\b)",
    r"\b(?:as|to)\s+(?:the|an|a|any|this)\s+(?:\w+\s+)?" + _GRADER + r"\b\W+(?:you\s+(?:must|should|will|shall|are\s+to)|"
    r"(?:please\s+)?(?:give|rate|score|assign|award|output|return|respond|reply|answer|write|grade|ignore|disregard|just))\b",
    r"\b" + _GRADER + r"s?\s*[:,]\s*(?:please\s+)?(?:give|rate|score|assign|award|output|return|respond|reply|answer|write|ignore|disregard|forget)\b",
    r"\b(?:ai|llm|model|system|assistant)s?\s+(?:that\s+is\s+|who\s+is\s+)?(?:grading|evaluating|judging|scoring|assessing|rating)\s+(?:this|these|the\s+(?:answer|response|output|transcript))\b",
    r"\bnew\s+(?:rubric|grading\s+(?:rules|instructions|criteria)|scoring\s+(?:rules|instructions))\b",
    # (an object or an article is required: "Grade 5 students" is not a demand)
    _IMPERATIVE + r"(?:give|assign|award|rate|score|grade|mark)\s+(?:(?:it|this|that|the)\s+(?:(?:answer|response|reply|output|transcript|session)\s+)?|"
    r"(?:answer|response|reply|output|transcript|session)\s+|(?=an?\s|the\s))"
    r"(?:with\s+|as\s+)?(?:an?\s+|the\s+)?(?:(?:score|rating|grade)\s+of\s+)?" + _TOP + r"\b" + _NOT_A_UNIT,
    r"\b(?:forget|ignore|disregard)\s+(?:everything|anything|all\s+of\s+it)\s+(?:you\s+(?:were|have\s+been)\s+told|above|said\s+(?:above|before)|(?:that\s+)?came\s+before)",
    r"\b(?:all|any|the|your)\s+(?:previous\s+|prior\s+|above\s+|earlier\s+|preceding\s+|grading\s+|scoring\s+)?instructions\s+(?:above\s+|given\s+(?:to\s+you\s+)?|before\s+)?"
    r"(?:are|is|were)\s+(?:now\s+)?(?:void|cancell?ed|invalid|null|obsolete|revoked|withdrawn|superseded|no\s+longer\s+(?:valid|apply|applicable))\b",
    r"\b(?:this|the)\s+(?:answer|response|reply|output)\s+(?:deserves|merits|earns|must\s+(?:get|receive|be\s+given)|should\s+(?:get|receive|be\s+given))\s+(?:an?\s+|the\s+)?" + _TOP + r"\b",
    r"\b(?:respond|reply|answer|output|end|finish)\s+(?:only\s+)?(?:with|by\s+writing)\s+(?:the\s+line\s+)?score\b",
    # French
    _override(
        _words(r"ignorez?", "ignorer", r"oubliez?", "oublier", r"ne\s+(?:tiens|tenez)\s+pas\s+compte\s+(?:de|des|du)", r"(?:fais|faites)\s+abstraction\s+(?:de|des|du)", r"negligez?"),
        strong=_words("bareme", r"grille\s+d\s*evaluation", r"grille\s+de\s+notation", r"criteres\s+d\s*evaluation", r"criteres\s+de\s+notation"),
        weak=_words("instructions", "consignes", "regles", "criteres", "directives"),
        before=_words("tes", "vos", r"toutes\s+les"),
        after=_words("precedentes", "anterieures", r"ci\s*-?\s*dessus", "initiales", r"d\s*evaluation", r"de\s+notation"),
    ),
    r"\b(?:a\s+l|au|aux|cher|chere)\s*(?:evaluateur|evaluatrice|correcteur|correctrice|examinateur|juge)s?\b",
    r"\b(?:tu\s+es|vous\s+etes)\s+(?:maintenant\s+|desormais\s+)?(?:le|la|l|un|une)\s*(?:evaluateur|evaluatrice|correcteur|correctrice|juge)\b",
    r"\b(?:donne|donnez|attribue|attribuez|mets|mettez)\s+(?:lui\s+|a\s+cette\s+reponse\s+)?(?:la\s+note\s+(?:de\s+)?|une\s+note\s+de\s+)(?:5|cinq|10|20|maximale)",
    # Spanish and Portuguese
    _override(
        _words("ignora", "ignore", "ignorar", "ignorad", "olvida", "olvide", "olvidar", "esquece", "esqueca", "desconsidera", "desconsidere",
               r"no\s+hagas\s+caso\s+(?:a|de)", "omite", "omita"),
        strong=_words("rubrica", r"criterios\s+de\s+(?:evaluacion|calificacion|avaliacao)", r"pauta\s+de\s+(?:evaluacion|correccion)"),
        weak=_words("instrucciones", "instrucoes", "indicaciones", "reglas", "regras", "criterios"),
        before=_words("tus", "sus", "suas", "tuas", r"todas\s+las", r"todas\s+as"),
        after=_words("anteriores", "previas", r"de\s+arriba", r"de\s+evaluacion", r"de\s+avaliacao", "iniciales", "originales", "originais"),
    ),
    r"\b(?:al|para\s+el|ao|para\s+o|querido|estimado|caro)\s+(?:evaluador|calificador|corrector|juez|avaliador|corretor)\b",
    r"\b(?:eres|usted\s+es|voce\s+e|tu\s+es)\s+(?:ahora\s+|agora\s+)?(?:el|la|un|una|o|um|uma)\s+(?:evaluador|calificador|corrector|juez|avaliador|corretor)\b",
    r"\b(?:dale|dele|da|de|asigna|asigne|atribua|pon|ponle)\s+(?:a\s+esta\s+(?:respuesta|resposta)\s+)?(?:un|una|uma|la|a)\s+(?:puntuacion|nota|calificacion|pontuacao)\s+(?:de\s+|maxima\b)\s*(?:5|cinco|10|diez|dez)?",
    # Italian
    _override(
        _words("ignora", "ignorate", "dimentica", "dimenticate", "trascura"),
        strong=_words(r"griglia\s+di\s+valutazione", r"criteri\s+di\s+valutazione"),
        weak=_words("istruzioni", "regole", "criteri"),
        before=_words(r"tutte\s+le", r"le\s+tue", r"tutti\s+i"),
        after=_words("precedenti", "sopra", "iniziali"),
    ),
    r"\b(?:al|per\s+il|caro)\s+(?:valutatore|correttore|giudice)\b",
    # German
    _override(
        _words("ignoriere", "ignorier", r"ignorieren\s+sie", "vergiss", r"vergessen\s+sie", "missachte", r"missachten\s+sie", "uberspringe"),
        strong=_words("bewertungskriterien", "bewertungsschema", "bewertungsrichtlinien", "rubrik", "bewertungsrubrik"),
        weak=_words("anweisungen", "anweisung", "vorgaben", "regeln", "kriterien", "richtlinien", "instruktionen"),
        before=_words("alle", "deine", "ihre", "vorherigen", "bisherigen", "obigen", "fruheren", "ursprunglichen"),
        after=_words("oben", r"von\s+vorhin"),
    ),
    r"\b(?:an\s+den|an\s+die|fur\s+den|liebe[rs]?|hallo)\s+(?:bewerter|bewerterin|prufer|pruferin|gutachter|korrektor)\b",
    r"\bdu\s+bist\s+(?:jetzt\s+|nun\s+)?(?:der|die|ein|eine)\s+(?:bewerter|bewerterin|prufer|pruferin|gutachter)\b",
    r"\b(?:gib|geben\s+sie|vergib|vergeben\s+sie)\s+(?:dieser\s+antwort\s+|der\s+antwort\s+|ihr\s+)?(?:die\s+|eine\s+)?(?:note\s+|bewertung\s+|punktzahl\s+)?(?:5|funf|hochste\s+(?:note|punktzahl|bewertung)|volle\s+punktzahl|bestnote|hochstnote)\b",
]
# Cyrillic and CJK phrases, matched on `_native(text)`.
_INSTRUCTION_NATIVE = [
    # Russian: objects that belong to a grader, or instructions qualified as earlier ones.
    r"(?:игнорируй|игнорируйте|проигнорируй|проигнорируйте|забудь|забудьте|не\s+обращай(?:те)?\s+внимания\s+на|не\s+учитывай(?:те)?|пренебреги|отбрось|отбросьте)"
    r"(?:\W+\w+){0,4}?\W+(?:критери\w*\s+оцен\w*|рубрик\w*|шкал\w*\s+оцен\w*|(?:все|свои|твои|ваши|предыдущ\w*|прежн\w*|вышеуказанн\w*|изначальн\w*|системн\w*)\s+(?:\w+\s+)?(?:инструкц\w*|указани\w*|правил\w*|промпт\w*))",
    r"(?:оценщик\w*|проверяющ\w*|экзаменатор\w*|асессор\w*)\s*[:,]",
    r"(?:дорогой|уважаемый|для|к)\s+(?:оценщик\w*|проверяющ\w*|экзаменатор\w*|асессор\w*)",
    r"ты\s+(?:теперь\s+|сейчас\s+)?(?:оценщик|проверяющий|экзаменатор|асессор)",
    r"(?:поставь|поставьте|дай|дайте|выстави|выставите)\s+(?:этому\s+ответу\s+|ему\s+|ответу\s+)?(?:оценку\s+|балл\s+)?(?:5|пять|пятерку|пятёрку|высш\w+\s+(?:оценк\w+|балл\w*)|максимальн\w+\s+(?:оценк\w+|балл\w*))",
    # Chinese and Japanese
    r"(?:忽略|忽视|无视|無視|忘记|忘掉|不要理会|不要遵守|不要管|跳过|覆盖)(?:掉)?(?:所有|全部|一切|之前|以前|先前|上面|以上|上述|前面|原来|原有)+(?:的)?(?:所有|全部)?(?:的)?(?:指令|指示|说明|規則|规则|评分标准|評分標準|标准|提示|要求|评分细则|评估标准)",
    r"(?:忽略|忽视|无视|無視|忘记|忘掉|不要理会|不要遵守|跳过)(?:掉)?(?:评分标准|評分標準|评分细则|评估标准|评分规则)",
    r"(?:以前|前|上記|これまで)の(?:指示|命令|ルール|基準|評価基準)を(?:無視|忘れ)",
    r"(?:评分员|评分者|评委|评审员|评估者|阅卷人|評価者|採点者)(?:[:,，：]|请|你好)",
    r"(?:致|给|各位|亲爱的)(?:评分员|评分者|评委|评审员|评估者|阅卷人)",
    r"你(?:现在)?是(?:一个|一名)?(?:评分员|评分者|评委|评审员|评估者|阅卷人)",
    r"(?:给|為|为)(?:这个|这条|该|此)?(?:回答|答案|回复|回應|输出)(?:打|评|给)?(?:5|五|满|最高)分",
    r"(?:请|直接)(?:打|给)(?:出)?(?:满分|最高分)",
]

# Labels of a score; French `note` only with a scale written after it (see below),
# since in English it is "Note: 5 items".
_SCORE_LABEL = (
    r"(?:final\s+|overall\s+|total\s+)?(?:score|rating|grade|verdict|evaluation|puntuacion|puntaje|calificacion|"
    r"valoracion|pontuacao|punteggio|voto|bewertung|punktzahl|gesamtnote|endnote)"
)
_SEPARATOR = r"\s*(?::|=|=>|->|-|–|—|\bis\b|\bequals\b|\best\b|\bes\b|\bist\b)\s*"
# A value on the judge's scale: 1 to 5, perhaps "/5" or "out of 5"; or a top mark on another scale.
_VALUE = (
    r"(?:[1-5](?!\d|[.,]\d)(?:\s*(?:/|out\s+of|of|sur|de|von|su)\s*(?:5|10)\b)?|(?:10|20|100)\s*/\s*(?:10|20|100)\b|"
    r"(?:one|two|three|four|five|cinq|cinco|funf|cinque)\b|(?:full|top|perfect)\s+marks?\b|perfect\b|maximum\b)"
)
# "the score was 5-3", "Final score: 2 - 1": a match's result, not a grade.
_NOT_A_RESULT = r"(?!\s*(?:[-–—:]|to|a)\s*\d)"
_SCORE_LATIN = [
    r"\b" + _SCORE_LABEL + _SEPARATOR + _VALUE + _NOT_A_RESULT,
    r"\bnote\s*(?::|=)\s*(?:[1-5]\s*(?:/|sur)\s*5|(?:10|20)\s*(?:/|sur)\s*(?:10|20))\b",
]
_SCORE_NATIVE = [
    r"(?:оценка|балл|баллы|итоговая\s+оценка|рейтинг)\s*(?::|=|-|—)\s*(?:[1-5](?!\d|[.,]\d)(?:\s*(?:/|из)\s*(?:5|10))?|пять|10\s*/\s*10)" + _NOT_A_RESULT,
    r"(?:评分|分数|得分|打分|最终得分|总分|評分|分數|スコア|評価|点数)\s*(?::|=|为|是|為)\s*(?:[1-5](?!\d|[.,]\d)(?:\s*/\s*(?:5|10))?|五|满分|10\s*/\s*10)" + _NOT_A_RESULT,
]


def _compile(patterns: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns))


_INSTRUCTION_LATIN_RE = _compile(_INSTRUCTION_LATIN)
_INSTRUCTION_NATIVE_RE = _compile(_INSTRUCTION_NATIVE)
_SCORE_LATIN_RE = _compile(_SCORE_LATIN)
_SCORE_NATIVE_RE = _compile(_SCORE_NATIVE)


def injection_signals(text: str) -> tuple[str, ...]:
    """What in `text` addresses the grader: `instruction` (told to ignore the rubric,
    spoken to as the grader, asked for a top score) and `score` (a score written in
    the grader's form). Empty for text that does neither."""
    if not text:
        return ()
    latin, native = normalise(text), _native(text)
    found = []
    if _INSTRUCTION_LATIN_RE.search(latin) or _INSTRUCTION_NATIVE_RE.search(native):
        found.append("instruction")
    if _SCORE_LATIN_RE.search(latin) or _SCORE_NATIVE_RE.search(native):
        found.append("score")
    return tuple(found)


def suspected_injection(evidence: Mapping[str, str]) -> list[str]:
    """The evidence sections holding text that addresses the grader."""
    return [name for name, body in evidence.items() if injection_signals(body or "")]
