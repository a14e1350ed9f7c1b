"""Live onboarding: a model behind an OpenAI-compatible endpoint asked MMLU-Pro questions, graded, embedded and added
to the pool (``onboard``); and ``replay``, an endpoint answering as one of the vendored MMLU-Pro models did."""
