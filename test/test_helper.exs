# Heavy runs (stress, repeats, soak) are opt-in: `mix test --only heavy`.
ExUnit.start(exclude: [:heavy])
