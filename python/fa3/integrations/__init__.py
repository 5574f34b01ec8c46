"""fa3 inside other libraries: `fa3.integrations.transformers.register()`
makes fa3 an attention implementation of Hugging Face transformers."""
