"""`python -m benchmarks`: run the figures, print the table, write the JSON, plots and README."""

from benchmarks.runner import main

if __name__ == "__main__":
    main()
