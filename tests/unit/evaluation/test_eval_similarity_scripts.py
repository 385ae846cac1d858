"""similarity: ``fuzzy`` on long text in scripts written without spaces (Japanese, Chinese,
Thai), each character a token of its own."""

from __future__ import annotations

from eval_factories import case, trace

from toolwatch.evaluation.arguments import ToolArguments
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.settings import ToolArgumentsSettings
from toolwatch.evaluation.similarity import _TOKEN, FUZZY_LONG_CHARS, score_value
from toolwatch.model_evaluation import ExpectedCall
from toolwatch.names import NameNormalizer

JA = (
    "ご注文いただいた商品が破損していたとのことで大変申し訳ございませんでした"
    "ご返金の手続きを開始いたしましたので数日以内にお客様の口座に反映される予定です"
    "ご不明な点がございましたらお気軽にお問い合わせくださいませどうぞよろしくお願いいたします"
) * 2
JA_ONE_CHAR = JA.replace("数日以内", "五日以内", 1)  # one character of 238
TH = "เราได้เริ่มดำเนินการคืนเงินให้ท่านแล้วและจะเข้าบัญชีภายในไม่กี่วันขอบคุณที่ใช้บริการ" * 3


def test_fuzzy_one_character_changed_in_a_long_japanese_text_scores_high() -> None:
    assert len(JA) >= FUZZY_LONG_CHARS
    assert score_value("fuzzy", JA, JA_ONE_CHAR, 0.05, True) > 0.95


def test_fuzzy_one_character_changed_in_a_long_thai_text_scores_high() -> None:
    assert len(TH) >= FUZZY_LONG_CHARS
    changed = TH.replace("ไม่กี่วัน", "ไม่กี่เดือน", 1)
    assert score_value("fuzzy", TH, changed, 0.05, True) > 0.95


def test_each_ideograph_and_kana_is_a_token_and_korean_words_stay_words() -> None:
    assert _TOKEN.findall("返金カタ order42 환불 완료.") == [
        "返",
        "金",
        "カ",
        "タ",
        "order42",
        "환불",
        "완료",
        ".",
    ]


def test_fuzzy_japanese_reply_with_one_character_changed_raises_no_finding() -> None:
    settings = ToolArgumentsSettings.model_validate({"threshold": 0.8})
    evaluator = ToolArguments(settings, NameNormalizer())
    expected = ExpectedCall("send_reply", {"message": JA}, field_match={"message": "fuzzy"})
    result = evaluator(
        trace(("send_reply", {"message": JA_ONE_CHAR})), Reference(expected=case(expected))
    )
    assert result is not None
    assert result.findings == ()
