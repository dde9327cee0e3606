"""The DFS model store: where trainers publish versions and scorers load them.

Trainers and scorers never import each other; they meet here and on Kafka topics.
"""
