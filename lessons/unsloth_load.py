if kit.on_gpu:
    from unsloth import FastLanguageModel  # before TRL: it patches transformers and TRL (the setup cell imported it)
    with unsloth_guard(p, kit.runtime) as started:        # the kit: one vLLM engine per process, an OOM explained
        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=p.model_name,                          # the preset's Hub checkpoint
            max_seq_length=p.max_seq_length,                  # longest prompt + completion, in tokens
            load_in_4bit=p.load_in_4bit,                      # True: 4-bit weights, about a third of fp16's memory
            fast_inference=p.fast_inference,                  # True: vLLM generates, sharing these weights
            max_lora_rank=p.lora_rank,                        # vLLM must know the largest adapter it will serve
            gpu_memory_utilization=p.gpu_memory_utilization,  # vLLM's share of the free memory: weights + KV cache
            # vllm_enforce_eager=True (only with fast_inference): vLLM without CUDA graphs, if its engine fails to start
            **({"enforce_eager": True} if p.vllm_enforce_eager else {}),
        )
        started(model)                                    # the kit: vLLM really started (if not: why, and the fix)
        model = FastLanguageModel.get_peft_model(
            model,
            r=p.lora_rank,                                    # adapter rank: its size and capacity
            target_modules=list(p.lora_target_modules),       # q/k/v/o attention and gate/up/down MLP projections
            lora_alpha=p.lora_alpha,                          # the update is scaled by lora_alpha / r
            use_gradient_checkpointing="unsloth" if p.gradient_checkpointing else False,  # recompute: less memory
            random_state=p.seed,
        )
