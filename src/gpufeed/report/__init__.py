"""Saved results and the HTML pages made from them: each page is a pure function of its saved --json document.

Modules:
- document.py: the about block, to_jsonable, loading and checking a saved document and making its page, each through
  its kind
- kinds/: the kinds of saved document, one module each (body keys, body check, page), and KINDS, the one list
- html.py: one self-contained page, headings, tables, notes and matplotlib charts inlined as SVG
- train_page.py: the page of gpufeed train
- doctor_page.py: the page of gpufeed doctor
- bench_page.py: the page of gpufeed bench
- plan_page.py: the page of gpufeed plan
- language_plan_page.py: the page of gpufeed plan for a language model
- plan_check.py: the plan pages' section for --check
- compare_page.py: the page of gpufeed compare (and of the doctor's A/B mode)
- compare_markdown.py: a comparison's short Markdown summary for a pull-request comment (--markdown)
- doctor_ranks.py: the doctor page's section for a run on several ranks
"""
