"""TRL's GRPOTrainer with its vLLM server (trl-grpo.sbatch), the server's address and the
weight-sync port given on the command line from the plugin's variables.

    accelerate launch … trl_grpo.py --model M --vllm_server_host H --vllm_server_port P \
        --vllm_group_port G
"""

import argparse

from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer


def reward_len(completions, **kwargs):
    """A toy reward (TRL's quick-start one): completions near 20 characters."""
    return [-abs(20 - len(c)) for c in completions]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--vllm_server_host", required=True)
    parser.add_argument("--vllm_server_port", type=int, required=True)
    parser.add_argument("--vllm_group_port", type=int, required=True)
    args = parser.parse_args()
    config = GRPOConfig(
        output_dir="grpo-out",
        use_vllm=True,
        vllm_mode="server",
        vllm_server_host=args.vllm_server_host,
        vllm_server_port=args.vllm_server_port,
        vllm_group_port=args.vllm_group_port,
    )
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=reward_len,
        args=config,
        train_dataset=load_dataset("trl-lib/tldr", split="train"),
    )
    trainer.train()


if __name__ == "__main__":
    main()
