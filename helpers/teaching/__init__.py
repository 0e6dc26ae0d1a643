"""What only the notebooks use: one function per lesson step (course), self-checking exercises, the reward
playground, GRPO's maths taken apart; and the instructor guide's class plans (class_plans). The training itself is
helpers.train; nothing here is on its path."""
