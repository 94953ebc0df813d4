"""The trained model outside the course: a Hugging Face ``MarianMTModel`` folder that
``transformers`` loads with no custom code (:mod:`~transformer_book.interop.hf_export`),
and that folder converted for CTranslate2 (:mod:`~transformer_book.interop.ctranslate`).

Nothing is imported here, so that the command line can register ``export``
(:mod:`~transformer_book.interop.cli_args`) before torch or ``transformers`` load.
"""
