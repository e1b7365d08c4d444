[
  inputs: ["{mix,.formatter}.exs", "{config,lib,test,build_support,examples,bench}/**/*.{ex,exs}"]
]
